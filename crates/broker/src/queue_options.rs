//! The queue options, each listed once (docs/wire.md §3.2): its `/configure` wire name, its
//! column of `queen.queues`, what it accepts, its `/configure` default and the column default
//! that implicit creation gets. Everything else is driven from this table: the `/configure`
//! parser (`engine/queues.rs`), the defaults `queen.configure_queue_v1` applies (sent by
//! `store/queues.rs`), the reading of a queue row (`store/queues.rs`) and the echo
//! (`http/queues.rs`). The columns themselves come from versioned migrations, which are
//! immutable; `tests/admin/queue_options.rs` checks the applied schema against this table
//! (every option column, its type and its default), so neither side can move alone.

use queen_proto::scalar::Scalar;
use queen_proto::Name;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// What an option accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A queue label (namespace, task): a name by the edge rule, or empty. Echoed at the top
    /// of the `/configure` answer, not under `options`.
    Label,
    Bool,
    /// An integer in `[min, max]`: out-of-range values are refused, or clamped when `clamp`.
    Int {
        min: i32,
        max: i32,
        clamp: bool,
    },
}

/// A default value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Text(&'static str),
    Bool(bool),
    Int(i32),
}

impl Setting {
    pub fn to_json(self) -> Value {
        match self {
            Setting::Text(s) => Value::from(s),
            Setting::Bool(b) => Value::from(b),
            Setting::Int(n) => Value::from(n),
        }
    }
}

/// One queue option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueOption {
    /// The camelCase name on the wire (`/configure` body and echo).
    pub wire: &'static str,
    /// The column of `queen.queues`.
    pub column: &'static str,
    pub kind: Kind,
    /// What `/configure` gives a new queue, a `null` and a `replace`.
    pub default: Setting,
    /// The column default: what a queue created implicitly (a push, a registering pop) gets.
    pub implicit: Setting,
}

const fn label(wire: &'static str) -> QueueOption {
    QueueOption {
        wire,
        column: wire,
        kind: Kind::Label,
        default: Setting::Text(""),
        implicit: Setting::Text(""),
    }
}

const fn flag(wire: &'static str, column: &'static str, default: bool) -> QueueOption {
    QueueOption {
        wire,
        column,
        kind: Kind::Bool,
        default: Setting::Bool(default),
        implicit: Setting::Bool(default),
    }
}

/// An integer option, `0..=i32::MAX` unless narrowed.
const fn int(wire: &'static str, column: &'static str, default: i32) -> QueueOption {
    QueueOption {
        wire,
        column,
        kind: Kind::Int {
            min: 0,
            max: i32::MAX,
            clamp: false,
        },
        default: Setting::Int(default),
        implicit: Setting::Int(default),
    }
}

impl QueueOption {
    /// Refuses values outside `[min, max]`.
    const fn range(self, min: i32, max: i32) -> Self {
        QueueOption {
            kind: Kind::Int {
                min,
                max,
                clamp: false,
            },
            ..self
        }
    }

    /// Clamps values into `[min, max]`.
    const fn clamped(self, min: i32, max: i32) -> Self {
        QueueOption {
            kind: Kind::Int {
                min,
                max,
                clamp: true,
            },
            ..self
        }
    }

    /// A column default that differs from the `/configure` default.
    const fn implicitly(self, column_default: i32) -> Self {
        QueueOption {
            implicit: Setting::Int(column_default),
            ..self
        }
    }
}

/// Every queue option.
pub const OPTIONS: &[QueueOption] = &[
    label("namespace"),
    label("task"),
    int("priority", "priority", 0).range(i32::MIN, i32::MAX),
    int("leaseTime", "lease_time", 300)
        .range(1, i32::MAX)
        .implicitly(60),
    int("retryLimit", "retry_limit", 3),
    int("retryDelay", "retry_delay", 0),
    int("maxSize", "max_queue_size", 0),
    int("ttl", "ttl", 0),
    flag("deadLetterQueue", "dead_letter_queue", true),
    flag("dlqAfterMaxRetries", "dlq_after_max_retries", true),
    int("delayedProcessing", "delayed_processing", 0),
    int("windowBuffer", "window_buffer", 0),
    flag("retentionEnabled", "retention_enabled", false),
    int("retentionSeconds", "retention_seconds", 0),
    int(
        "completedRetentionSeconds",
        "completed_retention_seconds",
        0,
    ),
    int("maxWaitTimeSeconds", "max_wait_time_seconds", 0),
    flag("encryptionEnabled", "encryption_enabled", false),
    int("minPopWaitTime", "min_pop_wait_time", 0).clamped(0, 60_000),
    int("dedupWindowSeconds", "dedup_window_seconds", 3600).clamped(0, i32::MAX),
];

/// The option named `wire` on the wire.
pub fn by_wire(wire: &str) -> Option<&'static QueueOption> {
    OPTIONS.iter().find(|o| o.wire == wire)
}

/// The `/configure` defaults keyed by column: what `queen.configure_queue_v1` starts a new or
/// replaced queue from, resets a `null` to, and the columns it may write.
pub fn configure_defaults() -> Value {
    let map: Map<String, Value> = OPTIONS
        .iter()
        .map(|o| (o.column.to_string(), o.default.to_json()))
        .collect();
    Value::Object(map)
}

impl QueueOption {
    /// The option echoed under `options` (the labels are echoed at the top).
    pub fn echoed(&self) -> bool {
        self.kind != Kind::Label
    }

    /// The column's type as `information_schema.columns.data_type` names it.
    pub fn sql_type(&self) -> &'static str {
        match self.kind {
            Kind::Label => "text",
            Kind::Bool => "boolean",
            Kind::Int { .. } => "integer",
        }
    }

    /// The value to store for a non-null wire `value`, or the 400 naming the option.
    pub fn validate(&self, value: &Value) -> Result<Value> {
        let wire = self.wire;
        match self.kind {
            // A label is a name (discovery pops look it up); "" clears it.
            Kind::Label => match Name::from_json(wire, &Scalar::from(value)) {
                Ok(_) => Ok(value.clone()),
                Err(e) => Err(invalid(wire, &e.to_string())),
            },
            Kind::Bool => match value {
                Value::Bool(_) => Ok(value.clone()),
                _ => Err(invalid(wire, "must be true or false")),
            },
            Kind::Int { min, max, clamp } => {
                let (min, max) = (i64::from(min), i64::from(max));
                match integer(value) {
                    Some(n) if clamp => Ok(Value::from(n.clamp(min, max))),
                    Some(n) if (min..=max).contains(&n) => Ok(Value::from(n)),
                    Some(_) => Err(invalid(wire, &format!("must be between {min} and {max}"))),
                    None => Err(invalid(wire, "must be an integer")),
                }
            }
        }
    }
}

/// The 400 for an invalid value of `option`.
pub fn invalid(option: &str, reason: &str) -> Error {
    Error::InvalidOption {
        message: format!("invalid {option}: {reason}"),
        option: option.into(),
    }
}

/// A JSON number with an integral value (`300` or `300.0`).
fn integer(value: &Value) -> Option<i64> {
    if let Some(n) = value.as_i64() {
        return Some(n);
    }
    let f = value.as_f64()?;
    (f.fract() == 0.0 && f.abs() < 9.0e18).then_some(f as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_defaults_are_accepted_values() {
        let wires: HashSet<_> = OPTIONS.iter().map(|o| o.wire).collect();
        let columns: HashSet<_> = OPTIONS.iter().map(|o| o.column).collect();
        assert_eq!(wires.len(), OPTIONS.len(), "a wire name listed twice");
        assert_eq!(columns.len(), OPTIONS.len(), "a column listed twice");
        assert!(wires.iter().all(|w| *w != "replace" && *w != "queue"));
        for o in OPTIONS {
            for setting in [o.default, o.implicit] {
                // A default is a value the option accepts, stored as is.
                let value = setting.to_json();
                let stored = o.validate(&value).map_err(|e| format!("{}: {e}", o.wire));
                assert_eq!(stored, Ok(value), "{}", o.wire);
            }
        }
    }

    #[test]
    fn values_are_checked_by_kind() {
        let lease = by_wire("leaseTime").expect("listed");
        assert!(lease.validate(&Value::from(0)).is_err());
        assert_eq!(
            lease.validate(&Value::from(300.0)).ok(),
            Some(Value::from(300))
        );
        let wait = by_wire("minPopWaitTime").expect("listed");
        assert_eq!(
            wait.validate(&Value::from(1_i64 << 40)).ok(),
            Some(Value::from(60_000))
        );
        assert!(by_wire("deadLetterQueue")
            .expect("listed")
            .validate(&Value::from(1))
            .is_err());
        assert_eq!(configure_defaults()["lease_time"], Value::from(300));
    }
}
