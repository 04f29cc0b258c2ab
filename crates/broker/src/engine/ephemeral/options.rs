//! An ephemeral queue's options (docs/wire.md §25.2): the closed list of seven knobs the
//! official client sends to `configure`, their defaults and their bounds, each defined here
//! once. An absent knob is the default; a knob outside its bounds, of the wrong type or not in
//! the list is refused with a sentence naming it.

use serde_json::{json, Map, Value};

/// Default per-queue budget of payload bytes, and the most a queue may be given.
pub const DEFAULT_MAX_BYTES: i64 = 64 * 1024 * 1024;
pub const MAX_MAX_BYTES: i64 = 1024 * 1024 * 1024;
/// Default per-queue budget of messages, and the most a queue may be given.
pub const DEFAULT_MAX_LENGTH: i64 = 100_000;
pub const MAX_MAX_LENGTH: i64 = 10_000_000;
/// Longest `ttlSeconds` (seven days); 0, the default, keeps messages until consumed or pushed out.
pub const MAX_TTL_SECONDS: i64 = 7 * 24 * 3600;
/// Default lease of a delivered message, and the longest one.
pub const DEFAULT_LEASE_SECONDS: i64 = 30;
pub const MAX_LEASE_SECONDS: i64 = 3600;
/// Default redeliveries after the first delivery, and the most.
pub const DEFAULT_RETRY_LIMIT: i64 = 3;
pub const MAX_RETRY_LIMIT: i64 = 100;
/// Longest `windowBuffer.ms`.
pub const MAX_WINDOW_MS: i64 = 60_000;
/// Most messages one pop delivers (a larger `batch` is clamped); also the largest
/// `windowBuffer.count`.
pub const MAX_BATCH: i64 = 1000;

/// What breaching `maxBytes` / `maxLength` does to a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The push is refused: 429 `queue_full`.
    Reject,
    /// The oldest messages of the queue are dropped (counted) until the push fits.
    DropOldest,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Reject => "reject",
            Policy::DropOldest => "dropOldest",
        }
    }
}

/// Every option's default, as the SQL functions take them (`p_defaults`).
pub fn defaults() -> Value {
    json!({
        "maxBytes": DEFAULT_MAX_BYTES,
        "maxLength": DEFAULT_MAX_LENGTH,
        "policy": Policy::Reject.as_str(),
        "ttlSeconds": 0,
        "leaseSeconds": DEFAULT_LEASE_SECONDS,
        "retryLimit": DEFAULT_RETRY_LIMIT,
        "windowBuffer": { "ms": 0, "count": 0 },
    })
}

/// Checks a `configure` body's `options` object; answers the knobs it names, normalized (a
/// `windowBuffer` always carries both `ms` and `count`), as stored.
pub fn parse(options: &Value) -> Result<Value, String> {
    let Some(given) = options.as_object() else {
        return Err("options must be an object".into());
    };
    let mut out = Map::new();
    for (key, value) in given {
        let checked = match key.as_str() {
            "maxBytes" => json!(int(key, value, 1, MAX_MAX_BYTES)?),
            "maxLength" => json!(int(key, value, 1, MAX_MAX_LENGTH)?),
            "policy" => json!(policy(value)?.as_str()),
            "ttlSeconds" => json!(int(key, value, 0, MAX_TTL_SECONDS)?),
            "leaseSeconds" => json!(int(key, value, 1, MAX_LEASE_SECONDS)?),
            "retryLimit" => json!(int(key, value, 0, MAX_RETRY_LIMIT)?),
            "windowBuffer" => window(value)?,
            other => {
                return Err(format!(
                    "unknown option {other:?}; the options are maxBytes, maxLength, policy, \
                     ttlSeconds, leaseSeconds, retryLimit, windowBuffer"
                ))
            }
        };
        out.insert(key.clone(), checked);
    }
    Ok(Value::Object(out))
}

/// An integer option within `min..=max` (a JSON integer: not a float, string or boolean).
fn int(name: &str, value: &Value, min: i64, max: i64) -> Result<i64, String> {
    value
        .as_i64()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| format!("{name} must be an integer from {min} to {max}"))
}

fn policy(value: &Value) -> Result<Policy, String> {
    match value.as_str() {
        Some("reject") => Ok(Policy::Reject),
        Some("dropOldest") => Ok(Policy::DropOldest),
        _ => Err("policy must be \"reject\" or \"dropOldest\"".into()),
    }
}

/// `{"ms"?, "count"?}`, both integers (0: off).
fn window(value: &Value) -> Result<Value, String> {
    let Some(fields) = value.as_object() else {
        return Err("windowBuffer must be an object {\"ms\", \"count\"}".into());
    };
    if let Some(other) = fields.keys().find(|k| *k != "ms" && *k != "count") {
        return Err(format!(
            "unknown windowBuffer field {other:?}; it has ms and count"
        ));
    }
    let zero = json!(0);
    let ms = int(
        "windowBuffer.ms",
        fields.get("ms").unwrap_or(&zero),
        0,
        MAX_WINDOW_MS,
    )?;
    let count = int(
        "windowBuffer.count",
        fields.get("count").unwrap_or(&zero),
        0,
        MAX_BATCH,
    )?;
    Ok(json!({ "ms": ms, "count": count }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_is_checked_and_kept() {
        let got = parse(&json!({
            "maxBytes": 1024, "maxLength": 5, "policy": "dropOldest", "ttlSeconds": 0,
            "leaseSeconds": 2, "retryLimit": 0, "windowBuffer": {"ms": 25}
        }))
        .expect("valid");
        assert_eq!(got["windowBuffer"], json!({"ms": 25, "count": 0}));
        assert_eq!(got["retryLimit"], json!(0));
        assert_eq!(got["policy"], json!("dropOldest"));
    }

    #[test]
    fn refusals_name_the_knob() {
        for (bad, word) in [
            (json!({"maxBytes": 0}), "maxBytes"),
            (json!({"maxLength": 1.5}), "maxLength"),
            (json!({"leaseSeconds": "30"}), "leaseSeconds"),
            (json!({"retryLimit": -1}), "retryLimit"),
            (json!({"policy": "drop"}), "policy"),
            (json!({"ttl_second": 3}), "ttl_second"),
            (json!({"windowBuffer": {"ms": 1, "size": 2}}), "size"),
            (json!({"windowBuffer": 5}), "windowBuffer"),
            (json!([1]), "options"),
        ] {
            let err = parse(&bad).expect_err("refused");
            assert!(err.contains(word), "{bad}: {err}");
        }
    }

    #[test]
    fn the_defaults_pass_their_own_check() {
        assert_eq!(parse(&defaults()).expect("defaults are valid"), defaults());
    }
}
