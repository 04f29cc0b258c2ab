//! Key-value workers: a few workers on a few keys for the push phase, each reading a key and
//! then writing a unique value with `expect` = the version read (compare-and-set), sometimes
//! unconditionally, through whichever broker is up. Every operation goes to the [`History`]
//! with its invocation and completion times; checker/kv.rs judges linearizability per key.
//!
//! [`History`]: crate::history::History

use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_client::kv::{Expiry, KvVerdict};
use rand::Rng;
use serde_json::Value;

use super::{error_text, status_of, Ctx};
use crate::history::{KvAnswer, KvRec, KvWrite};

pub const WORKERS: usize = 4;
pub const KEYS: usize = 3;
const NS: &str = "chaos";
/// Share of writes sent without `expect`.
const UNCONDITIONAL: f64 = 0.2;
/// Pause between a worker's rounds.
const PAUSE_MS: u64 = 20;

/// The keys of this run (unique per run: an external database may hold an earlier run's).
pub fn keys() -> Vec<String> {
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    (0..KEYS).map(|k| format!("kv{k}-{run}")).collect()
}

pub async fn run(ctx: Arc<Ctx>, keys: Arc<Vec<String>>, id: usize) {
    let end = Instant::now() + ctx.profile.push_for;
    let mut n = 0u64;
    while Instant::now() < end {
        let key = {
            let mut rng = rand::thread_rng();
            keys[rng.gen_range(0..keys.len())].clone()
        };
        let read = get(&ctx, &key).await;
        if let Some(version) = read {
            n += 1;
            let expect = (!rand::thread_rng().gen_bool(UNCONDITIONAL)).then_some(version);
            let write = KvWrite {
                value: format!("w{id}-{n}"),
                expect,
            };
            put(&ctx, &key, write).await;
        }
        tokio::time::sleep(Duration::from_millis(PAUSE_MS)).await;
    }
}

/// Reads `key` and records it; the version read (0: absent), `None` without an answer.
async fn get(ctx: &Ctx, key: &str) -> Option<i64> {
    let invoked = ctx.now();
    let res = ctx.queen().kv().get(NS, key).await;
    let completed = ctx.now();
    ctx.history
        .http("kv", status_of(&res, 200), error_text(&res));
    let answer = match res {
        Ok(Some(e)) => observed(e.version, &e.value),
        Ok(None) => observed(0, &Value::Null),
        Err(_) => KvAnswer::Unknown,
    };
    let version = match answer {
        KvAnswer::Observed { version, .. } => Some(version),
        _ => None,
    };
    ctx.history.kv(KvRec {
        key: key.to_string(),
        write: None,
        invoked,
        completed,
        answer,
    });
    version
}

async fn put(ctx: &Ctx, key: &str, write: KvWrite) {
    let invoked = ctx.now();
    let expect = write.expect.map(|v| v.max(0) as u64);
    let value = Value::String(write.value.clone());
    let res = ctx
        .queen()
        .kv()
        .put(NS, key, value, Expiry::Forever, expect)
        .await;
    let completed = ctx.now();
    ctx.history
        .http("kv", status_of(&res, 200), error_text(&res));
    let answer = match res {
        Ok(KvVerdict::Applied(a)) => KvAnswer::Applied(a.version),
        Ok(KvVerdict::Refused(r)) => observed(r.version, &r.value),
        Err(_) => KvAnswer::Unknown,
    };
    ctx.history.kv(KvRec {
        key: key.to_string(),
        write: Some(write),
        invoked,
        completed,
        answer,
    });
}

/// A row as answered: our values are strings; anything else is kept as its JSON text.
fn observed(version: i64, value: &Value) -> KvAnswer {
    let value = match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    KvAnswer::Observed { version, value }
}
