//! Consumers: long-poll a queue for one group, record every delivery, then pick a behaviour
//! for the batch — ack it, nack its head (`failed`, charging the retry budget), `retry` or
//! `dlq` one message with the rest `completed` in the same call, stall past the lease, extend
//! the lease first, ack lease-less, or ack inside a transaction that also pushes.

use std::sync::Arc;
use std::time::Duration;

use queen_client::{AckItem, AckStatus, Message, PopResponse};
use rand::Rng;
use serde_json::{json, Value};

use super::{consumer_done, error_text, status_of, Ctx, PARTITIONS, QUEUES, QUEUE_MODE};
use crate::history::{AckAnswer, AckRec, Delivery, ExtendRec, PushOutcome, PushRec};

const MAX_BATCH: u32 = 20;
const POLL_MS: u64 = 1_000;

#[derive(Debug, Clone, Copy)]
enum Behaviour {
    Ack,
    LeaseLess,
    Extend,
    NackHead,
    Retry,
    Dlq,
    Transaction,
    Stall,
}

fn choose(draining: bool) -> Behaviour {
    let r: f64 = rand::thread_rng().gen();
    match r {
        _ if r < 0.02 && !draining => Behaviour::Stall,
        _ if r < 0.07 => Behaviour::NackHead,
        _ if r < 0.12 => Behaviour::Retry,
        _ if r < 0.14 => Behaviour::Dlq,
        // A transaction pushes a new message: not once consumers may be leaving.
        _ if r < 0.19 && !draining => Behaviour::Transaction,
        _ if r < 0.29 => Behaviour::LeaseLess,
        _ if r < 0.34 => Behaviour::Extend,
        _ => Behaviour::Ack,
    }
}

pub async fn run(ctx: Arc<Ctx>, queue: &'static str, group: Option<&'static str>, id: usize) {
    if group.is_some() {
        tokio::time::sleep(ctx.profile.late_groups).await;
    }
    let mut idle = 0;
    let mut txn_pushes = 0;
    while !consumer_done(&ctx, idle) {
        let batch = rand::thread_rng().gen_range(1..=MAX_BATCH);
        let mut q = ctx
            .queen()
            .queue(queue)
            .batch(batch)
            .wait(true)
            .timeout_ms(POLL_MS);
        if let Some(g) = group {
            q = q.group(g);
        }
        let pop_sent = ctx.now();
        let res = q.pop().await;
        ctx.history
            .http("pop", status_of(&res, 200), error_text(&res));
        match res {
            Ok(Some(pop)) => {
                idle = 0;
                record(&ctx, queue, group, &pop, pop_sent);
                let behaviour = choose(ctx.draining());
                act(&ctx, group, &pop.messages, behaviour, id, &mut txn_pushes).await;
            }
            Ok(None) => idle += 1,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn record(ctx: &Ctx, queue: &str, group: Option<&str>, pop: &PopResponse, pop_sent: u64) {
    let received = ctx.now();
    let recs = pop.messages.iter().map(|m| Delivery {
        seq: 0,
        group: group.unwrap_or(QUEUE_MODE).to_string(),
        queue: queue.to_string(),
        partition_id: m.partition_id.clone(),
        txn: m.transaction_id.clone(),
        offset: m.offset.unwrap_or(-1),
        lease: m.lease_id.clone(),
        lease_secs: ctx.profile.lease_secs,
        pop_sent,
        received,
    });
    ctx.history.deliveries(recs.collect::<Vec<_>>());
}

async fn act(
    ctx: &Ctx,
    group: Option<&str>,
    msgs: &[Message],
    behaviour: Behaviour,
    id: usize,
    txn_pushes: &mut usize,
) {
    let pick = rand::thread_rng().gen_range(0..msgs.len());
    let with = |status_at: &dyn Fn(usize) -> AckStatus| -> Vec<AckItem> {
        msgs.iter()
            .enumerate()
            .map(|(i, m)| AckItem::with_status(m, status_at(i), None))
            .collect()
    };
    let all_completed = || with(&|_| AckStatus::Completed);
    match behaviour {
        Behaviour::Ack => ack(ctx, group, msgs, all_completed()).await,
        Behaviour::LeaseLess => {
            let mut items = all_completed();
            items.iter_mut().for_each(|i| i.lease_id = None);
            ack(ctx, group, msgs, items).await
        }
        Behaviour::Extend => {
            extend(ctx, &msgs[0].lease_id).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            ack(ctx, group, msgs, all_completed()).await
        }
        Behaviour::NackHead => {
            let items = with(&|i| {
                if i == 0 {
                    AckStatus::Failed
                } else {
                    AckStatus::Completed
                }
            });
            ack(ctx, group, msgs, items).await
        }
        Behaviour::Retry => {
            let items = with(&|i| {
                if i == pick {
                    AckStatus::Retry
                } else {
                    AckStatus::Completed
                }
            });
            ack(ctx, group, msgs, items).await
        }
        Behaviour::Dlq => {
            let items = with(&|i| {
                if i == pick {
                    AckStatus::Dlq
                } else {
                    AckStatus::Completed
                }
            });
            ack(ctx, group, msgs, items).await
        }
        Behaviour::Transaction => {
            *txn_pushes += 1;
            transaction(ctx, group, msgs, format!("t{id}-{txn_pushes}")).await
        }
        Behaviour::Stall => {
            let past = Duration::from_secs(ctx.profile.lease_secs) + Duration::from_millis(1_500);
            tokio::time::sleep(past).await;
            ack(ctx, group, msgs, all_completed()).await
        }
    }
}

/// The record of one ack item, before its answer.
fn ack_rec(
    call: u64,
    group: Option<&str>,
    m: &Message,
    item: &AckItem,
    sent: (u64, u64),
) -> AckRec {
    AckRec {
        call,
        group: group.unwrap_or(QUEUE_MODE).to_string(),
        partition_id: m.partition_id.clone(),
        txn: m.transaction_id.clone(),
        offset: m.offset.unwrap_or(-1),
        status: match item.status {
            AckStatus::Completed => "completed",
            AckStatus::Failed => "failed",
            AckStatus::Retry => "retry",
            AckStatus::Dlq => "dlq",
        },
        lease: item.lease_id.clone(),
        via_transaction: false,
        sent: sent.0,
        answered: sent.1,
        answer: None,
    }
}

async fn ack(ctx: &Ctx, group: Option<&str>, msgs: &[Message], items: Vec<AckItem>) {
    let call = ctx.history.next_call();
    let sent = ctx.now();
    let res = ctx.queen().ack_batch(&items, group).await;
    let sent = (sent, ctx.now());
    ctx.history
        .http("ack", status_of(&res, 200), error_text(&res));
    let answers = res.ok();
    let recs = msgs.iter().zip(&items).enumerate().map(|(i, (m, item))| {
        let mut rec = ack_rec(call, group, m, item, sent);
        rec.answer = answers.as_ref().and_then(|a| a.get(i)).map(|r| AckAnswer {
            success: r.success,
            lease_released: r.lease_released,
            dlq: r.dlq,
        });
        rec
    });
    ctx.history.acks(recs.collect::<Vec<_>>());
}

async fn extend(ctx: &Ctx, lease: &str) {
    let seconds = ctx.profile.lease_secs * 2;
    let url = format!("{}/api/v1/lease/{lease}/extend", ctx.cluster.pick_url());
    let sent = ctx.now();
    let res = ctx
        .http
        .post(url)
        .json(&json!({ "seconds": seconds }))
        .send()
        .await;
    let (status, body) = match res {
        Ok(r) => (
            r.status().as_u16(),
            r.json::<Value>().await.unwrap_or(Value::Null),
        ),
        Err(e) => {
            ctx.history.http("extend", 0, e.to_string());
            return;
        }
    };
    ctx.history.http("extend", status, body.to_string());
    let renewed = body["renewed"].as_u64().unwrap_or(0) > 0;
    ctx.history.extend(ExtendRec {
        lease: lease.to_string(),
        seconds,
        sent,
        renewed,
    });
}

/// Acks the batch (`completed`, under its lease) and pushes one new message in one
/// transaction, all or nothing.
async fn transaction(ctx: &Ctx, group: Option<&str>, msgs: &[Message], txn: String) {
    let (queue, partition) = {
        let mut rng = rand::thread_rng();
        (
            QUEUES[rng.gen_range(0..QUEUES.len())],
            format!("p{}", rng.gen_range(0..PARTITIONS)),
        )
    };
    let mut ops: Vec<Value> = msgs
        .iter()
        .map(|m| {
            let mut op = json!({"type": "ack", "transactionId": m.transaction_id,
                "partitionId": m.partition_id, "status": "completed", "leaseId": m.lease_id});
            if let Some(g) = group {
                op["consumerGroup"] = json!(g);
            }
            op
        })
        .collect();
    ops.push(
        json!({"type": "push", "items": [{"queue": queue, "partition": partition,
        "payload": {"tx": txn}, "transactionId": txn}]}),
    );
    let body = json!({"operations": ops, "requiredLeases": [msgs[0].lease_id]});
    let url = format!("{}/api/v1/transaction", ctx.cluster.pick_url());
    let call = ctx.history.next_call();
    let sent = ctx.now();
    let answer = match ctx.http.post(url).json(&body).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.json::<Value>().await.unwrap_or(Value::Null);
            ctx.history.http("transaction", status, body.to_string());
            Some(body).filter(|_| status < 500)
        }
        Err(e) => {
            ctx.history.http("transaction", 0, e.to_string());
            None
        }
    };
    let sent = (sent, ctx.now());
    let committed = answer.as_ref().and_then(|a| a["success"].as_bool());
    let push_outcome = match committed {
        Some(true) => PushOutcome::Stored("queued".into()),
        Some(false) => PushOutcome::Failed("transaction rolled back".into()),
        None => PushOutcome::Unknown,
    };
    ctx.history.pushes([PushRec {
        queue: queue.to_string(),
        partition,
        txn: txn.clone(),
        outcome: push_outcome,
    }]);
    let recs = msgs.iter().enumerate().map(|(i, m)| {
        let mut rec = ack_rec(call, group, m, &AckItem::completed(m), sent);
        rec.via_transaction = true;
        rec.answer = committed.map(|ok| AckAnswer {
            success: ok
                && answer
                    .as_ref()
                    .is_some_and(|a| a["results"][i]["success"] != false),
            lease_released: ok,
            dlq: false,
        });
        rec
    });
    ctx.history.acks(recs.collect::<Vec<_>>());
}
