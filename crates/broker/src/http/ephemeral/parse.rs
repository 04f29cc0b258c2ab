//! Checking the bodies and query strings of `/api/v1/ephemeral/*` (docs/wire.md §25): closed
//! field lists, names by the name rule, limits from `engine::ephemeral`. Every refusal is an
//! [`Error::BadRequest`] whose sentence names the field.

use std::borrow::Cow;
use std::time::Duration;

use queen_proto::wire::QUEUE_MODE;
use queen_proto::Name;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::engine::ephemeral::options::{self, MAX_BATCH};
use crate::engine::ephemeral::{
    is_nack, Ack, MessageId, PopRequest, DEFAULT_PARTITION, MAX_ACKS, MAX_PUSH_MESSAGES,
};
use crate::error::{Error, Result};
use crate::http::extract::json_body;
use crate::http::pop::MAX_POP_TIMEOUT_MS;

fn name(field: &'static str, text: &str) -> Result<String> {
    Name::parse(field, text)
        .map(Name::into_string)
        .map_err(|e| Error::bad(e.to_string()))
}

/// A queue named in a path.
pub fn path_queue(text: &str) -> Result<String> {
    name("queue", text)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueBody<'a> {
    #[serde(borrow)]
    queue: Cow<'a, str>,
}

/// `{queue}` (reset).
pub fn queue_body(body: &[u8]) -> Result<String> {
    let b: QueueBody<'_> = json_body(body)?;
    name("queue", &b.queue)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigureBody<'a> {
    #[serde(borrow)]
    queue: Cow<'a, str>,
    options: Option<Value>,
}

/// `{queue, options?}`: the queue and its checked options (absent: every default).
pub fn configure(body: &[u8]) -> Result<(String, Value)> {
    let b: ConfigureBody<'_> = json_body(body)?;
    let queue = name("queue", &b.queue)?;
    let given = b
        .options
        .unwrap_or_else(|| Value::Object(Default::default()));
    let checked = options::parse(&given).map_err(Error::BadRequest)?;
    Ok((queue, checked))
}

/// A checked push: the ring and the payloads' JSON texts, as they arrived.
pub struct Push<'a> {
    pub queue: String,
    pub partition: String,
    pub payloads: Vec<&'a str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PushBody<'a> {
    #[serde(borrow)]
    queue: Cow<'a, str>,
    #[serde(borrow, default)]
    partition: Option<Cow<'a, str>>,
    #[serde(borrow)]
    messages: Vec<PushMessage<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PushMessage<'a> {
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// `{queue, partition?, messages:[{payload}]}`.
pub fn push(body: &[u8]) -> Result<Push<'_>> {
    let b: PushBody<'_> = json_body(body)?;
    let queue = name("queue", &b.queue)?;
    let partition = match b.partition {
        Some(p) => name("partition", &p)?,
        None => DEFAULT_PARTITION.to_string(),
    };
    if b.messages.is_empty() {
        return Err(Error::bad("messages must hold at least one message"));
    }
    if b.messages.len() > MAX_PUSH_MESSAGES {
        return Err(Error::bad(format!(
            "messages holds {} messages; at most {MAX_PUSH_MESSAGES} per push",
            b.messages.len()
        )));
    }
    let payloads = b.messages.iter().map(|m| m.payload.get()).collect();
    Ok(Push {
        queue,
        partition,
        payloads,
    })
}

/// The query of `GET /api/v1/ephemeral/pop`, every value as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PopQuery {
    queue: Option<String>,
    partition: Option<String>,
    batch: Option<String>,
    wait: Option<String>,
    timeout: Option<String>,
    group: Option<String>,
    #[serde(rename = "autoAck")]
    auto_ack: Option<String>,
}

fn flag(field: &str, text: Option<&str>) -> Result<bool> {
    match text {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(Error::bad(format!(
            "{field} must be true or false, not {other:?}"
        ))),
    }
}

/// Checks a pop's query; `default_wait` is the long poll of a `wait=true` without `timeout`.
pub fn pop(q: &PopQuery, default_wait: Duration) -> Result<PopRequest> {
    let queue = name("queue", q.queue.as_deref().unwrap_or_default())?;
    let partition = q
        .partition
        .as_deref()
        .map(|p| name("partition", p))
        .transpose()?;
    let group = match q.group.as_deref() {
        None => QUEUE_MODE.to_string(),
        Some(g) => name("group", g)?,
    };
    let batch = match q.batch.as_deref() {
        None => 1,
        Some(b) => b
            .parse::<i64>()
            .ok()
            .filter(|b| *b >= 1)
            .ok_or_else(|| Error::bad(format!("batch must be an integer >= 1, not {b:?}")))?
            .min(MAX_BATCH),
    };
    let wait = flag("wait", q.wait.as_deref())?;
    let timeout = q
        .timeout
        .as_deref()
        .map(|t| {
            t.parse::<u64>().map_err(|_| {
                Error::bad(format!(
                    "timeout must be a non-negative number of milliseconds, not {t:?}"
                ))
            })
        })
        .transpose()?;
    if timeout.is_some() && !wait {
        return Err(Error::bad(
            "timeout is the long poll of wait=true; send both",
        ));
    }
    let wait = wait.then(|| {
        timeout
            .map_or(default_wait, Duration::from_millis)
            .min(Duration::from_millis(MAX_POP_TIMEOUT_MS))
    });
    Ok(PopRequest {
        queue,
        partition,
        group,
        batch: i32::try_from(batch).unwrap_or(1),
        wait,
        auto_ack: flag("autoAck", q.auto_ack.as_deref())?,
    })
}

/// A checked ack call.
pub struct AckCall {
    pub queue: String,
    pub group: String,
    /// The ids as sent, for the answer, beside what they ask.
    pub ids: Vec<String>,
    pub acks: Vec<Ack>,
    /// Nack reasons the client gave (id, reason): logged, not stored.
    pub reasons: Vec<(String, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AckBody {
    queue: String,
    group: Option<String>,
    acks: Vec<AckEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AckEntry {
    id: String,
    status: Option<String>,
    error: Option<String>,
}

/// `{queue, group?, acks:[{id, status?, error?}]}`.
pub fn ack(body: &[u8]) -> Result<AckCall> {
    let b: AckBody = json_body(body)?;
    let queue = name("queue", &b.queue)?;
    let group = match b.group.as_deref() {
        None => QUEUE_MODE.to_string(),
        Some(g) => name("group", g)?,
    };
    if b.acks.len() > MAX_ACKS {
        return Err(Error::bad(format!(
            "acks holds {} entries; at most {MAX_ACKS} per call",
            b.acks.len()
        )));
    }
    let mut call = AckCall {
        queue,
        group,
        ids: Vec::with_capacity(b.acks.len()),
        acks: Vec::with_capacity(b.acks.len()),
        reasons: Vec::new(),
    };
    for (i, entry) in b.acks.into_iter().enumerate() {
        let id =
            MessageId::parse(&entry.id).map_err(|e| Error::bad(format!("acks[{i}].id: {e}")))?;
        call.acks.push(Ack {
            id,
            nack: is_nack(entry.status.as_deref()),
        });
        if let Some(reason) = entry.error {
            call.reasons.push((entry.id.clone(), reason));
        }
        call.ids.push(entry.id);
    }
    Ok(call)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> PopQuery {
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        };
        PopQuery {
            queue: get("queue"),
            partition: get("partition"),
            batch: get("batch"),
            wait: get("wait"),
            timeout: get("timeout"),
            group: get("group"),
            auto_ack: get("autoAck"),
        }
    }

    #[test]
    fn a_plain_pop_is_one_groupless_message_without_waiting() {
        let r = pop(&q(&[("queue", "inbox")]), Duration::from_secs(30)).expect("valid");
        assert_eq!(
            (r.batch, r.wait, r.group.as_str(), r.auto_ack, r.partition),
            (1, None, QUEUE_MODE, false, None)
        );
    }

    #[test]
    fn pop_refusals_name_the_parameter() {
        for (pairs, word) in [
            (vec![("batch", "0")], "batch"),
            (vec![("batch", "x")], "batch"),
            (vec![("wait", "yes")], "wait"),
            (vec![("wait", "true"), ("timeout", "-1")], "timeout"),
            (vec![("timeout", "10")], "timeout"),
            (vec![("autoAck", "1")], "autoAck"),
            (vec![("group", " g")], "group"),
        ] {
            let mut all = vec![("queue", "inbox")];
            all.extend(pairs);
            let err = pop(&q(&all), Duration::from_secs(30)).expect_err("refused");
            assert!(err.to_string().contains(word), "{all:?}: {err}");
        }
        let err = pop(&q(&[]), Duration::from_secs(30)).expect_err("no queue");
        assert!(err.to_string().contains("queue"), "{err}");
    }

    #[test]
    fn batch_and_timeout_are_clamped() {
        let r = pop(
            &q(&[
                ("queue", "i"),
                ("batch", "99999"),
                ("wait", "true"),
                ("timeout", "999999999"),
            ]),
            Duration::from_secs(30),
        )
        .expect("valid");
        assert_eq!(r.batch, 1000);
        assert_eq!(r.wait, Some(Duration::from_millis(MAX_POP_TIMEOUT_MS)));
    }

    #[test]
    fn a_push_keeps_each_payload_byte_for_byte() {
        let body =
            br#"{"queue":"q","messages":[{"payload":{"b":1, "a":[2.50]}},{"payload":null}]}"#;
        let p = push(body).expect("valid");
        assert_eq!(p.payloads, vec![r#"{"b":1, "a":[2.50]}"#, "null"]);
        assert_eq!(p.partition, DEFAULT_PARTITION);
    }

    #[test]
    fn push_refusals() {
        for (body, word) in [
            (&br#"{"queue":"q","messages":[]}"#[..], "at least one"),
            (br#"{"queue":"q","messages":[{"data":1}]}"#, "data"),
            (br#"{"queue":"q","messages":[{}]}"#, "payload"),
            (br#"{"queue":"","messages":[{"payload":1}]}"#, "queue"),
            (
                br#"{"queue":"q","partition":"a\u0001","messages":[{"payload":1}]}"#,
                "partition",
            ),
            (
                br#"{"queue":"q","messages":[{"payload":1}],"transactionId":"x"}"#,
                "transactionId",
            ),
        ] {
            let err = push(body).err().expect("refused").to_string();
            assert!(
                err.contains(word),
                "{}: {err}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn ack_statuses_and_ids() {
        let call = ack(
            br#"{"queue":"q","group":"g","acks":[{"id":"e:a:p:1"},{"id":"e:a:p:2","status":"retry","error":"boom"},{"id":"e:a:p:3","status":"ok"},{"id":"e:a:p:4","status":"nope"}]}"#,
        )
        .expect("valid");
        let nacks: Vec<bool> = call.acks.iter().map(|a| a.nack).collect();
        assert_eq!(nacks, vec![false, true, false, true]);
        assert_eq!(
            call.reasons,
            vec![("e:a:p:2".to_string(), "boom".to_string())]
        );
        let err = ack(br#"{"queue":"q","acks":[{"id":"m-1"}]}"#)
            .err()
            .expect("bad id");
        assert!(err.to_string().contains("acks[0].id"), "{err}");
        let err = ack(br#"{"queue":"q","acks":[{"id":"e:1:p:1","status":true}]}"#)
            .err()
            .expect("status not a string");
        assert!(err.to_string().contains("bad body"), "{err}");
    }
}
