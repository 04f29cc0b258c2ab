//! The maintenance toggles (docs/wire.md §19): `GET`/`POST /api/v1/system/maintenance` (push
//! maintenance: pushes go to the disk spool) and `/api/v1/system/maintenance/pop` (pops answer
//! 204 at once), with `{"enabled": bool}`. The flags are cluster-wide (`engine::maintenance`);
//! the spool figures are this broker's.

use crate::http::auth::CallerTenant;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::engine::maintenance::{self, FlagKey, Status};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::extract::{json_body, RawBody};

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/system/maintenance", get(get_push).post(set_push))
        .route("/api/v1/system/maintenance/pop", get(get_pop).post(set_pop))
}

async fn get_push(State(st): State<Engine>) -> Result<Json<Value>> {
    Ok(Json(push_body(
        &maintenance::status(&st, st.push.spool.as_deref()).await?,
    )))
}

async fn set_push(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let on = enabled(&body)?;
    Ok(Json(push_body(
        &maintenance::set(&st, st.push.spool.as_deref(), FlagKey::Push, on, &tenant).await?,
    )))
}

async fn get_pop(State(st): State<Engine>) -> Result<Json<Value>> {
    Ok(Json(pop_body(
        &maintenance::status(&st, st.push.spool.as_deref()).await?,
    )))
}

async fn set_pop(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let on = enabled(&body)?;
    Ok(Json(pop_body(
        &maintenance::set(&st, st.push.spool.as_deref(), FlagKey::Pop, on, &tenant).await?,
    )))
}

/// `{"enabled": true|false}`; anything else is a 400 naming the field.
fn enabled(body: &[u8]) -> Result<bool> {
    let value: Value = json_body(body)?;
    match value.get("enabled") {
        Some(Value::Bool(on)) => Ok(*on),
        Some(_) => Err(Error::bad("enabled must be a boolean")),
        None => Err(Error::bad("enabled (a boolean) is required")),
    }
}

fn push_body(s: &Status) -> Value {
    let message = match (s.flags.push, s.spool.enabled) {
        (true, true) => "push maintenance is on: pushes are written to the brokers' disk spools",
        (true, false) => "push maintenance is on: this broker has no disk spool and refuses pushes",
        (false, _) => "push maintenance is off: spooled pushes are being replayed",
    };
    json!({
        "maintenanceMode": s.flags.push,
        "popMaintenanceMode": s.flags.pop,
        "bufferedMessages": s.spool.messages,
        "bufferHealthy": s.spool.healthy,
        "message": message,
    })
}

fn pop_body(s: &Status) -> Value {
    let message = if s.flags.pop {
        "pop maintenance is on: every pop answers 204 at once"
    } else {
        "pop maintenance is off"
    };
    json!({
        "popMaintenanceMode": s.flags.pop,
        "maintenanceMode": s.flags.push,
        "message": message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_must_carry_a_boolean_enabled() {
        assert_eq!(enabled(br#"{"enabled":true}"#).ok(), Some(true));
        assert_eq!(enabled(br#"{"enabled":false,"x":1}"#).ok(), Some(false));
        for bad in [
            &br#"{}"#[..],
            br#"{"enabled":"yes"}"#,
            br#"[true]"#,
            b"{",
            b"",
        ] {
            assert!(enabled(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
