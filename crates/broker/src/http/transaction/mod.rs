//! `POST /api/v1/transaction` (docs/wire.md §10): parse the operations into a `TxnRequest` (the
//! JSON body in [`parse`], the binary `QTB1` body in [`binary`]), run it, and render HTTP 200
//! for both outcomes ([`render`]; a rollback is a business outcome, never a 5xx the clients
//! would replay). A malformed bundle is 400 with the same failure shape.

mod binary;
mod parse;
mod render;

use crate::engine::transaction::{self, TxnOutcome};
use crate::engine::Engine;
use crate::error::Error;
use crate::http::auth::{CallerTenant, Producer};
use crate::http::budget::BodyBudget;
use crate::http::extract::{is_binary, RawBody};
use crate::http::kv::precondition_lost;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use render::{committed, counted, failure};

pub fn routes() -> Router<Engine> {
    Router::new().route("/api/v1/transaction", post(transaction_json))
}

async fn transaction_json(
    State(st): State<Engine>,
    producer: Producer,
    CallerTenant(tenant): CallerTenant,
    Extension(budget): Extension<BodyBudget>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Response {
    let bundle_id = queen_proto::new_v7().to_string();
    // A binary body's share of the in-flight budget, held until the bundle has run.
    let mut inflated = None;
    let parsed = if is_binary(&headers) {
        binary::parse(&st, &budget, body)
            .await
            .map(|(req, counts_only, charge)| {
                inflated = Some(charge);
                (req, counts_only)
            })
    } else {
        parse::parse_bundle(&body).map(|req| (req, false))
    };
    let (outcome, counts_only) = match parsed {
        Ok((req, counts_only)) => (
            transaction::run(st.writers(), req, producer.0, &tenant).await,
            counts_only,
        ),
        Err(e) => (Err(e), false),
    };
    drop(inflated);
    match outcome {
        Ok(TxnOutcome::Committed(results)) if counts_only => {
            Json(counted(&bundle_id, &results)).into_response()
        }
        Ok(TxnOutcome::Committed(results)) => Json(committed(&bundle_id, &results)).into_response(),
        Ok(TxnOutcome::RolledBack { reason, error }) => {
            failure(StatusCode::OK, &bundle_id, &error, reason.as_str())
        }
        Ok(TxnOutcome::PreconditionLost { lost, failed_index }) => {
            let mut body = precondition_lost(&lost, failed_index);
            body["transactionId"] = bundle_id.into();
            Json(body).into_response()
        }
        // Only a streams cycle carries the identity a replay is told by (http/streams).
        Ok(TxnOutcome::Replayed(_)) => {
            Error::internal("a transaction without a stream cycle was answered as a replay")
                .into_response()
        }
        Err(Error::BadRequest(error)) => {
            failure(StatusCode::BAD_REQUEST, &bundle_id, &error, "bad_request")
        }
        Err(e) => e.into_response(),
    }
}
