//! Queue configuration and deletion (docs/wire.md §3, §4). `/configure` options arrive under
//! their camelCase wire names, either in `options` or at the top level; they are validated
//! here, by the table of `queue_options.rs`, into a patch keyed by column (a value sets, `null` resets to the default, absence
//! keeps) that `queen.configure_queue_v1` applies under the queue row's lock.

use crate::engine::tenant::{self, Tenant};
use serde_json::{Map, Value};

use queen_proto::Name;

use crate::engine::encryption::KEY_VARIABLE;
use crate::engine::pop::PopState;
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::queue_options::{self, invalid, OPTIONS};
use crate::store::queues;

pub use crate::store::queues::QueueRow;

/// A validated `/configure` request.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigureRequest {
    pub queue: String,
    /// Column name → value, or `null` to reset that column to its default.
    pub patch: Map<String, Value>,
    /// Start from the defaults instead of the stored row (a directive; never stored).
    pub replace: bool,
}

/// Reads a `/configure` body (docs/wire.md §3.1).
pub fn parse_configure(body: &Value) -> Result<ConfigureRequest> {
    let Value::Object(top) = body else {
        return Err(Error::bad("bad body: expected a JSON object"));
    };
    let queue = match top.get("queue") {
        Some(Value::String(q)) if !q.is_empty() => Name::parse("queue", q)?.into_string(),
        _ => return Err(Error::bad("queue is required")),
    };

    let mut options = match top.get("options") {
        Some(Value::Object(o)) => o.clone(),
        _ => top
            .iter()
            .filter(|(k, _)| k.as_str() != "queue" && k.as_str() != "options")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    // A non-empty top-level label is folded in when `options` does not carry its own.
    for label in ["namespace", "task"] {
        if let Some(v @ Value::String(s)) = top.get(label) {
            if !s.is_empty() && !options.contains_key(label) {
                options.insert(label.into(), v.clone());
            }
        }
    }

    let replace = match options.get("replace").or_else(|| top.get("replace")) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("replace", "must be true or false")),
    };

    // No option is accepted and ignored: a name this broker does not know is refused.
    if let Some(unknown) = options
        .keys()
        .find(|k| k.as_str() != "replace" && queue_options::by_wire(k).is_none())
    {
        return Err(Error::InvalidOption {
            message: format!("unknown option {unknown}: not supported by this broker"),
            option: unknown.clone(),
        });
    }

    let mut patch = Map::new();
    for option in OPTIONS {
        let Some(value) = options.get(option.wire) else {
            continue;
        };
        let value = if value.is_null() {
            Value::Null
        } else {
            option.validate(value)?
        };
        patch.insert(option.column.into(), value);
    }
    Ok(ConfigureRequest {
        queue,
        patch,
        replace,
    })
}

/// Creates or reconfigures the queue; returns its effective row. Turning encryption on needs
/// this broker's key (docs/engine.md §3.1): without one the queue's pushes could not be sealed.
/// The queue and its labels are `tenant`'s (stored qualified, `engine/tenant.rs`). The
/// queue's hot-list rings reseed on their next pop: a shorter `delayedProcessing` or
/// `windowBuffer` makes partitions the ring parked until the old horizon visible sooner.
pub async fn configure(
    state: &Shared,
    pop: &PopState,
    req: &ConfigureRequest,
    tenant: &Tenant,
) -> Result<QueueRow> {
    if req.patch.get("encryption_enabled") == Some(&Value::Bool(true))
        && !state.encryption.has_key()
    {
        return Err(Error::InvalidOption {
            message: format!(
                "encryptionEnabled needs {KEY_VARIABLE}: this broker has no encryption key \
                 configured, so it could not seal the queue's payloads"
            ),
            option: "encryptionEnabled".into(),
        });
    }
    let queue = tenant::qualify(tenant, "queue", &req.queue)?;
    let mut patch = req.patch.clone();
    for label in ["namespace", "task"] {
        if let Some(Value::String(name)) = patch.get_mut(label) {
            tenant::qualify_in_place(tenant, label, name)?;
        }
    }
    let conn = state.store.conn().await?;
    let row = queues::configure(&conn, &queue, &Value::Object(patch), req.replace).await?;
    state
        .encryption
        .learn(&row.name, row.flag("encryption_enabled"));
    pop.reconfigured(&queue);
    Ok(row)
}

/// Deletes `tenant`'s queue and everything it owns; `None` when it does not exist, else the number
/// of partitions deleted.
pub async fn delete(
    state: &Shared,
    pop: &PopState,
    queue: &str,
    tenant: &Tenant,
) -> Result<Option<i32>> {
    let queue: &str = &tenant::qualify(tenant, "queue", queue)?;
    let conn = state.store.conn().await?;
    let deleted = queues::delete(&conn, queue).await?;
    if deleted.is_some() {
        pop.forget(queue);
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value) -> Result<ConfigureRequest> {
        parse_configure(&body)
    }

    #[test]
    fn python_client_shape() {
        let req = parse(json!({"queue":"orders","namespace":null,"task":null,
            "options":{"leaseTime":300,"retryLimit":3,"priority":0,"delayedProcessing":0,"windowBuffer":0,
                       "maxSize":0,"retentionSeconds":0,"completedRetentionSeconds":0,"encryptionEnabled":false}}))
        .expect("valid");
        assert_eq!(req.queue, "orders");
        assert_eq!(req.patch.len(), 9);
        assert_eq!(req.patch["lease_time"], json!(300));
        assert_eq!(req.patch["max_queue_size"], json!(0));
        assert!(
            !req.patch.contains_key("namespace"),
            "a null top-level label is not folded"
        );
        assert!(!req.replace);
    }

    #[test]
    fn top_level_options_labels_nulls_and_clamps() {
        let req = parse(
            json!({"queue":"q","namespace":"billing","leaseTime":null,"replace":true,
            "minPopWaitTime":999999,"dedupWindowSeconds":-5,"ttl":60.0}),
        )
        .expect("valid");
        assert_eq!(req.patch["namespace"], json!("billing"));
        assert_eq!(req.patch["lease_time"], Value::Null);
        assert_eq!(req.patch["min_pop_wait_time"], json!(60000));
        assert_eq!(req.patch["dedup_window_seconds"], json!(0));
        assert_eq!(req.patch["ttl"], json!(60));
        assert!(req.replace);
        let req = parse(json!({"queue":"q","task":"t","options":{"task":"inner"}})).expect("valid");
        assert_eq!(req.patch["task"], json!("inner"));
    }

    #[test]
    fn refusals_name_the_option() {
        for (body, option) in [
            (
                json!({"queue":"q","options":{"leaseTime":"soon"}}),
                "leaseTime",
            ),
            (json!({"queue":"q","options":{"leaseTime":0}}), "leaseTime"),
            (
                json!({"queue":"q","options":{"retryLimit":-1}}),
                "retryLimit",
            ),
            (json!({"queue":"q","options":{"ttl":1.5}}), "ttl"),
            (
                json!({"queue":"q","options":{"deadLetterQueue":"yes"}}),
                "deadLetterQueue",
            ),
            (json!({"queue":"q","options":{"namespace":7}}), "namespace"),
            (
                json!({"queue":"q","options":{"priority":4294967296u64}}),
                "priority",
            ),
            (json!({"queue":"q","replace":"yes"}), "replace"),
            (json!({"queue":"q","options":{"leaseTim":5}}), "leaseTim"),
            (json!({"queue":"q","conflation":true}), "conflation"),
        ] {
            match parse(body.clone()) {
                Err(Error::InvalidOption { option: got, .. }) => assert_eq!(got, option, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
        for body in [
            json!({"options":{}}),
            json!({"queue":7}),
            json!({"queue":""}),
            json!([1]),
        ] {
            assert!(matches!(parse(body), Err(Error::BadRequest(_))));
        }
        assert!(matches!(
            parse(json!({"queue":"a\u{1}b"})),
            Err(Error::BadRequest(_))
        ));
    }
}
