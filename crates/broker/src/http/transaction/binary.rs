//! The binary transaction body `QTB1` (docs/wire.md §10.4) of `POST /api/v1/transaction`: a
//! JSON head (the bundle without its pushes) followed by pre-compressed push groups. It
//! parses into the same `TxnRequest` as the JSON body — the head's operations first, then
//! the pushed messages in wire order, which is the order the answer lists them in — and
//! runs through the same transaction engine.
//!
//! A bundle's pushes are written by the transaction engine inside its one PostgreSQL
//! transaction, so the client's frames are re-packed there (with their own message ids)
//! rather than stored as sent.

use axum::body::Bytes;
use queen_proto::push_bin::parse_txn;

use super::parse::parse_bundle;
use crate::engine::push::binary::decode_group;
use crate::engine::transaction::{TxnOp, TxnRequest};
use crate::engine::Engine;
use crate::error::Result;
use crate::http::budget::{BodyBudget, Charge};
use crate::http::extract::parse_binary;

/// Parses a `QTB1` body; the flag says whether the answer counts instead of listing, and the
/// charge holds the body's share of the in-flight budget (keep it until the answer).
pub(super) async fn parse(
    st: &Engine,
    budget: &BodyBudget,
    body: Bytes,
) -> Result<(TxnRequest, bool, Charge)> {
    let (env, charge) = parse_binary(st, budget, body, "transaction", parse_txn).await?;
    let counts_only = env.counts_only();
    let mut req = if env.head.iter().all(u8::is_ascii_whitespace) {
        TxnRequest::default()
    } else {
        parse_bundle(&env.head)?
    };
    for group in env.groups {
        req.ops
            .extend(decode_group(group)?.items.into_iter().map(TxnOp::Push));
    }
    Ok((req, counts_only, charge))
}
