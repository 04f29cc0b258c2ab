//! Refusals made by the router itself rather than by a handler answer in the broker's JSON
//! shape too (found by the `route` cargo-fuzz target, crates/broker/fuzz): a path segment
//! that is not UTF-8 once percent-decoded (axum answered `text/plain` "Invalid URL"), and a
//! path served with another method (axum answered 405 with an empty body).

use crate::common;

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Sends a body-less request; returns the status, the `Allow` header and the JSON body.
async fn send(b: &common::TestBroker, method: Method, path: &str) -> (StatusCode, String, Value) {
    let r = b
        .http
        .request(method.clone(), b.at(path))
        .send()
        .await
        .expect("request");
    let status = r.status();
    let allow = r
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    let bytes = r.bytes().await.expect("body");
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{method} {path} → {status}: not JSON ({e}): {:?}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, allow, body)
}

#[tokio::test]
async fn a_path_segment_that_is_not_utf8_is_a_json_400() {
    let b = common::broker().await;
    let cases = [
        (Method::GET, "/api/v1/resources/queues/%FF"),
        (Method::GET, "/api/v1/resources/queues/%FF/depth"),
        (Method::DELETE, "/api/v1/resources/queues/%FF"),
        (Method::GET, "/api/v1/consumer-groups/%FF"),
        (Method::DELETE, "/api/v1/consumer-groups/%FF"),
        (Method::POST, "/api/v1/consumer-groups/%FF/subscription"),
        (Method::DELETE, "/api/v1/consumer-groups/g/queues/%FF"),
        (Method::POST, "/api/v1/consumer-groups/g/queues/%C3/seek"),
        (
            Method::POST,
            "/api/v1/consumer-groups/g/queues/q/partitions/%FF/seek",
        ),
        (Method::POST, "/api/v1/lease/%FF/extend"),
        (Method::GET, "/api/v1/messages/1/%FF"),
        (Method::GET, "/api/v1/pop/queue/%FF"),
    ];
    for (method, path) in cases {
        let (status, _, body) = send(&b, method.clone(), path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains("UTF-8"), "{method} {path}: {body}");
    }
}

#[tokio::test]
async fn a_method_the_path_does_not_serve_is_a_json_405() {
    let b = common::broker().await;
    let cases = [
        (Method::PUT, "/api/v1/push", "POST"),
        (Method::GET, "/api/v1/ack", "POST"),
        (Method::POST, "/health", "GET"),
        (Method::PUT, "/api/v1/consumer-groups/g", "DELETE"),
        (Method::GET, "/api/v1/transaction", "POST"),
    ];
    for (method, path, allowed) in cases {
        let (status, allow, body) = send(&b, method.clone(), path).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert!(body["error"].is_string(), "{method} {path}: {body}");
        assert!(allow.contains(allowed), "{method} {path}: Allow {allow:?}");
    }
}
