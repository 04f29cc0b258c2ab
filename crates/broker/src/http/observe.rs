//! What the broker records of every request it answers (docs/wire.md §15): the request total of
//! `/metrics`, the per-route count and latency of `/metrics/prometheus`, and one debug log line
//! with method, route, status and duration. Routes are the router's templates, written the way
//! the docs write them (`/api/v1/pop/queue/:queue`), never raw paths, so no queue name or id
//! becomes a label.
//!
//! Applied with `Router::layer`, so it runs after routing (the matched template is known) and
//! around every other layer added before it.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::engine::Engine;

/// The route label of a request no route matched (the 404 fallback).
const UNMATCHED: &str = "unmatched";

/// Counts, times and logs one request.
pub async fn request(State(st): State<Engine>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| route_label(p.as_str()));
    st.counters.requests.fetch_add(1, Relaxed);
    let response = next.run(req).await;
    let took = started.elapsed();
    let route = route.as_deref().unwrap_or(UNMATCHED);
    let status = response.status().as_u16();
    st.telemetry.request(method, route, status, took);
    tracing::debug!(
        method,
        route,
        status,
        duration_ms = took.as_secs_f64() * 1e3,
        "request"
    );
    response
}

/// The standard methods by name; any other (clients may send anything) as `other`.
fn method_label(m: &Method) -> &'static str {
    const KNOWN: [(Method, &str); 7] = [
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::PATCH, "PATCH"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
    ];
    KNOWN
        .iter()
        .find(|(known, _)| known == m)
        .map_or("other", |&(_, name)| name)
}

/// A route template in the docs' notation: `{queue}` → `:queue`, `{*rest}` → `*rest`. (Braces
/// are legal in label values, but line-oriented tools read them as the end of the label set.)
fn route_label(template: &str) -> String {
    let segments: Vec<String> = template
        .split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(wildcard) if wildcard.starts_with('*') => wildcard.to_string(),
                Some(param) => format!(":{param}"),
                None => seg.to_string(),
            },
        )
        .collect();
    segments.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_labels_use_the_docs_notation() {
        assert_eq!(
            route_label("/api/v1/messages/{partitionId}/{transactionId}"),
            "/api/v1/messages/:partitionId/:transactionId"
        );
        assert_eq!(route_label("/assets/{*path}"), "/assets/*path");
        assert_eq!(route_label("/health"), "/health");
    }

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        let odd = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&odd), "other");
    }
}
