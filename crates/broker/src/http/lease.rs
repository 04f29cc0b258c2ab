//! `POST /api/v1/lease/:leaseId/extend` (docs/wire.md §9): parsing and rendering of a lease
//! renewal; the rule lives in `engine::lease` and SQL.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use queen_proto::LeaseId;
use serde_json::{json, Value};

use crate::engine::lease;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::auth::CallerTenant;
use crate::http::extract::{json_body, Path, RawBody};

pub fn routes() -> Router<Engine> {
    Router::new().route("/api/v1/lease/{lease_id}/extend", post(extend_lease))
}

/// Body `{"seconds": n}`, optional (the Python client sends none for `{}`).
async fn extend_lease(
    State(st): State<Engine>,
    Path(lease_id): Path<String>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let lease_id = LeaseId::parse("leaseId", &lease_id)?;
    let seconds = requested_seconds(&body)?;
    let renewal = lease::extend(&st.ack, &lease_id, seconds, &tenant).await?;
    let expiry = renewal.expires_at.clone();
    Ok(Json(json!({
        "leaseId": lease_id.as_str(),
        "success": renewal.renewed > 0,
        "renewed": renewal.renewed,
        "newExpiresAt": expiry,
        "expiresAt": expiry,
        "lease_expires_at": expiry,
    })))
}

fn requested_seconds(body: &[u8]) -> Result<Option<i64>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = json_body(body)?;
    let seconds = match &value {
        Value::Null => return Ok(None),
        Value::Object(obj) => obj.get("seconds"),
        _ => return Err(Error::bad("bad body: expected a JSON object")),
    };
    match seconds {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(s) => Ok(Some(s)),
            // Fractions round down; a huge float saturates (the engine clamps anyway).
            None => Ok(n.as_f64().map(|f| f.floor() as i64)),
        },
        Some(Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| Error::bad("seconds must be a number")),
        Some(_) => Err(Error::bad("seconds must be a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_body_is_optional() {
        assert_eq!(requested_seconds(b"").ok(), Some(None));
        assert_eq!(requested_seconds(b"{}").ok(), Some(None));
        assert_eq!(
            requested_seconds(br#"{"seconds":120}"#).ok(),
            Some(Some(120))
        );
        assert_eq!(requested_seconds(br#"{"seconds":1.9}"#).ok(), Some(Some(1)));
        assert!(requested_seconds(br#"{"seconds":"soon"}"#).is_err());
        assert!(requested_seconds(b"{").is_err());
    }
}
