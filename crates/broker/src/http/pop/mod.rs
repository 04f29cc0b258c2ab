//! The three pop routes (docs/wire.md §7): parameter parsing with the broker's defaults, and the
//! two answers: 200 with the body [`render`] writes for the engine's claim (the JSON envelope
//! or `QPF1`), or 204 with no body and no Content-Length.

mod framed;
mod json;
mod render;

use crate::engine::tenant::Tenant;
use crate::http::auth::CallerTenant;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use queen_proto::{pop_framed, Name};
use serde_json::json;

use crate::engine::pop::autopilot::{DEFAULT_BATCH, DEFAULT_PARTITIONS, MAX_PARTITIONS};
use crate::engine::pop::{self, Ask, PopOutcome, PopRequest, PopShape, Subscription};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::extract::Query;

/// Content-Type of the framed pop answer (docs/wire.md §7.7).
const FRAMED_CONTENT_TYPE: &str = "application/x-queen-pop";
/// Largest `batch` honoured; larger requests are clamped.
const MAX_BATCH: i64 = 10_000;
/// Longest long-poll `timeout` honoured, in ms (five minutes, docs/wire.md §7.2); longer
/// requests (and a longer `DEFAULT_TIMEOUT`) are clamped, so no pop holds a connection and a
/// parked waiter without bound.
pub const MAX_POP_TIMEOUT_MS: u64 = 300_000;

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/pop", get(discovery).head(head_refused))
        .route(
            "/api/v1/pop/queue/{queue}",
            get(wildcard).head(head_refused),
        )
        .route(
            "/api/v1/pop/queue/{queue}/partition/{partition}",
            get(targeted).head(head_refused),
        )
}

/// `HEAD` on a pop route. A pop claims what it answers, and a `HEAD` answer has no body to
/// carry it: axum would run the GET handler and drop the body, so the claimed messages would
/// be lost (autoAck) or leased to nobody. Refused before anything is claimed (also on the
/// ephemeral pop, http/ephemeral/mod.rs).
pub(super) async fn head_refused() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET")],
        Json(json!({
            "error": "HEAD is not served on pop routes: a pop claims messages and a HEAD answer cannot carry them; use GET",
            "code": "method_not_allowed",
        })),
    )
        .into_response()
}

type Params = Query<Vec<(String, String)>>;

async fn wildcard(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    path: Result<Path<String>, PathRejection>,
    Query(params): Params,
) -> Result<Response> {
    let queue = Name::parse("queue", &path_segment(path)?)?.into_string();
    serve(&st, PopShape::Wildcard { queue }, &params, &tenant).await
}

async fn targeted(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(params): Params,
) -> Result<Response> {
    let (queue, partition) = path_segment(path)?;
    let queue = Name::parse("queue", &queue)?.into_string();
    let partition = Name::parse("partition", &partition)?.into_string();
    serve(
        &st,
        PopShape::Targeted { queue, partition },
        &params,
        &tenant,
    )
    .await
}

async fn discovery(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Query(params): Params,
) -> Result<Response> {
    let label =
        |field| Name::optional(field, param(&params, field)).map(|n| n.map(Name::into_string));
    let namespace = label("namespace")?.unwrap_or_default();
    let task = label("task")?.unwrap_or_default();
    if namespace.is_empty() && task.is_empty() {
        let body =
            json!({ "success": false, "error": "namespace or task is required", "messages": [] });
        return Ok((StatusCode::BAD_REQUEST, Json(body)).into_response());
    }
    serve(
        &st,
        PopShape::Discovery { namespace, task },
        &params,
        &tenant,
    )
    .await
}

fn path_segment<T>(path: Result<Path<T>, PathRejection>) -> Result<T> {
    path.map(|Path(v)| v)
        .map_err(|e| Error::bad(format!("bad path: {}", e.body_text())))
}

async fn serve(
    st: &Engine,
    shape: PopShape,
    params: &[(String, String)],
    tenant: &Tenant,
) -> Result<Response> {
    let req = parse_request(
        shape.of_tenant(tenant)?,
        params,
        Duration::from_millis(st.cfg.default_timeout_ms),
    )?;
    let claim = match pop::pop(&st.pop, &req).await? {
        PopOutcome::Empty => return Ok(StatusCode::NO_CONTENT.into_response()),
        PopOutcome::Claimed(claim) => claim,
    };
    let r = render::render(claim).await?;
    // Every claimed segment was undecodable (logged by the renderer; a leased one redelivers
    // when its lease expires): nothing to deliver, the answer of an empty pop.
    if r.messages == 0 {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let content_type = if pop_framed::is_framed(&r.body) {
        FRAMED_CONTENT_TYPE
    } else {
        "application/json"
    };
    Ok(([(header::CONTENT_TYPE, content_type)], r.body).into_response())
}

/// The last value of `name` (later occurrences win).
fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Builds the request with the defaults of docs/spec/life-of-a-pop.md. `autopilot=true` records
/// which of `batch` and `partitions` the request left to the broker (the engine sizes them, or
/// keeps the defaults with `QUEEN_POP_AUTOPILOT=false`). Unknown parameters are ignored;
/// `namespace`/`task` matter only to discovery.
fn parse_request(
    shape: PopShape,
    params: &[(String, String)],
    default_timeout: Duration,
) -> Result<PopRequest> {
    let is_targeted = matches!(shape, PopShape::Targeted { .. });
    if flag(params, "conflation")?.unwrap_or(false) {
        return Err(Error::bad("conflation is not supported by this broker"));
    }
    let batch = positive(params, "batch")?;
    // A targeted pop claims its one partition: nothing to size.
    let partitions = if is_targeted {
        Some(1)
    } else {
        positive(params, "partitions")?
    };
    let autopilot = flag(params, "autopilot")?.unwrap_or(false).then_some(Ask {
        batch: batch.is_none(),
        partitions: partitions.is_none(),
    });
    let batch = batch.map_or(DEFAULT_BATCH, |b| b.min(MAX_BATCH) as i32);
    let partitions = partitions.map_or(DEFAULT_PARTITIONS, |p| {
        p.min(i64::from(MAX_PARTITIONS)) as i32
    });
    let timeout = match param(params, "timeout") {
        None | Some("") => default_timeout,
        Some(v) => Duration::from_millis(
            v.parse::<u64>()
                .map_err(|_| invalid("timeout", v, "a non-negative number of milliseconds"))?,
        ),
    }
    .min(Duration::from_millis(MAX_POP_TIMEOUT_MS));
    let group = Name::optional("consumerGroup", param(params, "consumerGroup"))?.map_or_else(
        || queen_proto::wire::QUEUE_MODE.to_string(),
        Name::into_string,
    );
    let lease_seconds = match param(params, "leaseSeconds") {
        None | Some("") => None,
        Some(v) => {
            let secs = v.parse::<i32>().map_err(|_| {
                invalid(
                    "leaseSeconds",
                    v,
                    "an integer number of seconds up to 2147483647",
                )
            })?;
            // Non-positive values are ignored: the queue's lease time applies.
            (secs > 0).then_some(secs)
        }
    };
    Ok(PopRequest {
        shape,
        batch,
        partitions,
        wait: flag(params, "wait")?.unwrap_or(false),
        timeout,
        group,
        auto_ack: flag(params, "autoAck")?.unwrap_or(false),
        subscription: subscription(params)?,
        lease_seconds,
        // Lenient: any other value simply keeps the JSON answer.
        frames: param(params, "frames").is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1"),
        autopilot,
    })
}

/// `subscriptionFrom` (`now` or an ISO-8601 instant) wins over `subscriptionMode`
/// (`new`, `new-only`, `newonly` = future only; anything else = everything retained).
fn subscription(params: &[(String, String)]) -> Result<Subscription> {
    match param(params, "subscriptionFrom").map(str::trim) {
        None | Some("") => {}
        Some(v) if v.eq_ignore_ascii_case("now") => return Ok(Subscription::New),
        Some(v) => {
            let at = queen_proto::time::parse_iso(v).ok_or_else(|| {
                invalid("subscriptionFrom", v, "\"now\" or an ISO-8601 timestamp")
            })?;
            return Ok(Subscription::From(at));
        }
    }
    let mode = param(params, "subscriptionMode")
        .unwrap_or_default()
        .to_ascii_lowercase();
    Ok(match mode.as_str() {
        "new" | "new-only" | "newonly" => Subscription::New,
        _ => Subscription::All,
    })
}

fn positive(params: &[(String, String)], name: &str) -> Result<Option<i64>> {
    match param(params, name) {
        None | Some("") => Ok(None),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(invalid(name, v, "a positive integer")),
        },
    }
}

fn flag(params: &[(String, String)], name: &str) -> Result<Option<bool>> {
    match param(params, name) {
        None | Some("") => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") || v == "1" => Ok(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("false") || v == "0" => Ok(Some(false)),
        Some(v) => Err(invalid(name, v, "true or false")),
    }
}

fn invalid(name: &str, value: &str, expected: &str) -> Error {
    Error::bad(format!("invalid {name}: {value:?} (expected {expected})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpStatus;

    fn parse(query: &[(&str, &str)]) -> Result<PopRequest> {
        let params: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse_request(
            PopShape::Wildcard { queue: "q".into() },
            &params,
            Duration::from_millis(30_000),
        )
    }

    #[test]
    fn defaults_of_the_spec() {
        let r = parse(&[
            ("autopilot", "true"),
            ("frames", "true"),
            ("namespace", "x"),
        ])
        .expect("defaults");
        assert_eq!(
            (r.batch, r.partitions, r.wait, r.auto_ack),
            (200, 1, false, false)
        );
        assert_eq!(r.timeout, Duration::from_millis(30_000));
        assert_eq!(r.group, "__QUEUE_MODE__");
        assert_eq!(r.subscription, Subscription::All);
        assert_eq!(r.lease_seconds, None);
        assert_eq!(
            r.autopilot,
            Some(Ask {
                batch: true,
                partitions: true
            }),
            "autopilot=true leaves both unset knobs to the broker"
        );
        let set = parse(&[("autopilot", "true"), ("partitions", "3")]).expect("partitions");
        assert_eq!(
            (set.autopilot, set.partitions),
            (
                Some(Ask {
                    batch: true,
                    partitions: false
                }),
                3
            )
        );
        assert_eq!(
            parse(&[("autopilot", "false")]).expect("off").autopilot,
            None
        );
        assert_eq!(parse(&[]).expect("absent").autopilot, None);
    }

    #[test]
    fn values_and_aliases() {
        let r = parse(&[
            ("batch", "5"),
            ("partitions", "3"),
            ("wait", "1"),
            ("timeout", "250"),
            ("consumerGroup", "g"),
            ("autoAck", "TRUE"),
            ("subscriptionMode", "new-only"),
            ("leaseSeconds", "0"),
        ])
        .expect("parsed");
        assert_eq!(
            (r.batch, r.partitions, r.wait, r.auto_ack),
            (5, 3, true, true)
        );
        assert_eq!(
            (r.timeout, r.group.as_str()),
            (Duration::from_millis(250), "g")
        );
        assert_eq!(r.subscription, Subscription::New);
        assert_eq!(
            r.lease_seconds, None,
            "non-positive leaseSeconds is ignored"
        );
        let from = parse(&[
            ("subscriptionMode", "new"),
            ("subscriptionFrom", "2026-11-29T11:00:00.123456Z"),
        ])
        .expect("from");
        assert!(
            matches!(from.subscription, Subscription::From(_)),
            "a timestamp wins over the mode"
        );
        assert_eq!(
            parse(&[("subscriptionFrom", "now")])
                .expect("now")
                .subscription,
            Subscription::New
        );
        assert_eq!(
            parse(&[("batch", "99999999")]).expect("clamped").batch,
            MAX_BATCH as i32
        );
    }

    #[test]
    fn a_long_poll_timeout_is_clamped_to_five_minutes() {
        let most = Duration::from_millis(MAX_POP_TIMEOUT_MS);
        assert_eq!(most, Duration::from_secs(300));
        for v in ["300001", "86400000", "18446744073709551615"] {
            assert_eq!(parse(&[("timeout", v)]).expect(v).timeout, most, "{v}");
        }
        assert_eq!(parse(&[("timeout", "300000")]).expect("max").timeout, most);
        let long_default = parse_request(
            PopShape::Wildcard { queue: "q".into() },
            &[],
            Duration::from_millis(u64::MAX),
        )
        .expect("default");
        assert_eq!(long_default.timeout, most, "DEFAULT_TIMEOUT is clamped too");
    }

    #[test]
    fn invalid_values_name_the_parameter() {
        for (name, value) in [
            ("batch", "0"),
            ("batch", "x"),
            ("partitions", "-1"),
            ("wait", "maybe"),
            ("timeout", "-5"),
            ("autoAck", "2"),
            ("autopilot", "yes please"),
            ("subscriptionFrom", "yesterday"),
            ("leaseSeconds", "1.5"),
        ] {
            let e = parse(&[(name, value)])
                .err()
                .unwrap_or_else(|| panic!("{name}={value} accepted"));
            assert!(e.to_string().contains(name), "{e}");
            assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        }
        let e = parse(&[("conflation", "true")]).expect_err("conflation refused");
        assert!(e.to_string().contains("conflation"));
        assert!(parse(&[("conflation", "false")]).is_ok());
    }
}
