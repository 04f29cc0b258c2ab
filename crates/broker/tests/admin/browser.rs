//! The browser guard (`http/browser.rs`, docs/wire.md §1.4) against real brokers with auth off,
//! the default: a cross-site pop (an `<img>` tag, a page's `fetch`) is refused and claims
//! nothing, a `text/plain` or form body never reaches a handler (415), a request naming a host
//! of a rebinding attacker is refused, while origins and hosts the operator allowed, the
//! dashboard's same-origin calls and clients that are no browser keep working (an allowed
//! origin gets CORS answers, its preflights included); and the boot
//! log warns when auth is off on an address that is not loopback.

use queen_broker::config::LogFormat;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tracing_subscriber::EnvFilter;

use crate::common::{self, TestBroker};
use crate::logs::Captured;

/// One request with extra headers; the status and the JSON answer (Null when none).
async fn send(
    b: &TestBroker,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<(&str, &str)>,
) -> (StatusCode, Value) {
    let mut req = b.http.request(method, b.at(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some((content_type, body)) = body {
        req = req
            .header("content-type", content_type)
            .body(body.to_string());
    }
    let r = req.send().await.expect("request");
    let status = r.status();
    let raw = r.bytes().await.expect("body");
    (status, serde_json::from_slice(&raw).unwrap_or(Value::Null))
}

#[track_caller]
fn assert_refused(answer: &(StatusCode, Value), status: StatusCode, code: &str, names: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["code"], code, "{}", answer.1);
    let error = answer.1["error"].as_str().unwrap_or_default();
    assert!(error.contains(names), "want {names:?}: {error}");
}

const POP: &str = "/api/v1/pop/queue/drive-by?autoAck=true&wait=false";

#[tokio::test]
async fn a_cross_site_pop_is_refused_and_claims_nothing() {
    let b = common::broker().await;
    b.push("drive-by", "p", &[json!({"secret": 1})]).await;

    // What a page's fetch() sends, and what an <img src=…> sends (no Origin on a no-cors GET).
    let fetch = [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    let img = [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-mode", "no-cors"),
    ];
    let older = [("origin", "http://evil.example")];
    for headers in [&fetch[..], &img[..], &older[..]] {
        let answer = send(&b, Method::GET, POP, headers, None).await;
        assert_refused(
            &answer,
            StatusCode::FORBIDDEN,
            "cross_site_refused",
            "QUEEN_ALLOWED_ORIGINS",
        );
    }
    // A page of another port of the same host is another origin too (same-site).
    let sibling = [
        ("origin", "http://127.0.0.1:1"),
        ("sec-fetch-site", "same-site"),
    ];
    let answer = send(&b, Method::GET, POP, &sibling, None).await;
    assert_eq!(answer.0, StatusCode::FORBIDDEN, "{}", answer.1);

    // The message is still there for a client that is no browser.
    let popped = common::pop(&b, "drive-by", None, None, 10, "&autoAck=true")
        .await
        .expect("the message was not taken by the refused pops");
    assert_eq!(popped.messages.len(), 1);
    assert_eq!(popped.messages[0]["data"], json!({"secret": 1}));
}

#[tokio::test]
async fn only_json_bodies_reach_the_handlers() {
    let b = common::broker().await;
    let on = r#"{"enabled":true}"#;
    for content_type in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        for path in [
            "/api/v1/system/maintenance",
            "/api/v1/system/maintenance/pop",
        ] {
            let answer = send(&b, Method::POST, path, &[], Some((content_type, on))).await;
            assert_refused(
                &answer,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "application/json",
            );
        }
    }
    // A body without any Content-Type is refused too (a typeless Blob a page may post).
    let untyped = b
        .http
        .post(b.at("/api/v1/system/maintenance/pop"))
        .body(on)
        .send()
        .await
        .expect("request");
    assert_eq!(untyped.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // The binary push body is for push and transaction only.
    let answer = send(
        &b,
        Method::POST,
        "/api/v1/system/maintenance",
        &[],
        Some(("application/x-queen-push", on)),
    )
    .await;
    assert_eq!(answer.0, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", answer.1);

    let (status, state) = b.get("/api/v1/system/maintenance").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(state["maintenanceMode"], false, "unchanged: {state}");
    assert_eq!(state["popMaintenanceMode"], false, "unchanged: {state}");
    // JSON (with parameters, or a +json type) still works, and so does an empty POST.
    let answer = send(
        &b,
        Method::POST,
        "/api/v1/system/maintenance/pop",
        &[],
        Some(("application/json; charset=utf-8", on)),
    )
    .await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
    let (_, state) = b.get("/api/v1/system/maintenance").await;
    assert_eq!(state["popMaintenanceMode"], true, "{state}");
    let refresh = b
        .http
        .post(b.at("/api/v1/stats/refresh"))
        .send()
        .await
        .expect("request");
    assert!(refresh.status().is_success(), "{}", refresh.status());
}

#[tokio::test]
async fn a_rebinding_host_is_refused_with_auth_off() {
    let b = common::broker().await;
    b.push("rebound", "p", &[json!(1)]).await;
    let port = b.url.rsplit(':').next().expect("port").to_string();
    let evil = format!("evil.example:{port}");
    // The page is same-origin with itself after the rebinding: its Origin names the same host.
    let origin = format!("http://{evil}");
    for headers in [
        vec![("host", evil.as_str())],
        vec![("host", evil.as_str()), ("origin", origin.as_str())],
    ] {
        let answer = send(&b, Method::GET, "/api/v1/resources/queues", &headers, None).await;
        assert_refused(
            &answer,
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            "QUEEN_ALLOWED_HOSTS",
        );
    }
    // Loopback names and addresses, names without a dot (a container's) are answered.
    let localhost = format!("localhost:{port}");
    let container = format!("queen:{port}");
    for host in [localhost.as_str(), container.as_str(), "127.0.0.1"] {
        let answer = send(&b, Method::GET, "/health", &[("host", host)], None).await;
        assert_eq!(answer.0, StatusCode::OK, "{host}: {}", answer.1);
    }
    // With auth on, a page has no token to send: the host is not checked.
    let authed = crate::auth::hs_broker(|_| {}).await;
    let answer = send(&authed, Method::GET, "/health", &[("host", &evil)], None).await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
}

#[tokio::test]
async fn allowed_origins_and_hosts_and_the_dashboard_work() {
    let b = common::broker_with(|cfg| {
        cfg.browser.allowed_origins = vec!["http://app.example:3000/".into()];
        cfg.browser.allowed_hosts = vec!["queen.example.com".into()];
    })
    .await;
    b.push("allowed", "p", &[json!(1)]).await;
    let app = [
        ("origin", "http://app.example:3000"),
        ("sec-fetch-site", "cross-site"),
    ];
    let path = "/api/v1/pop/queue/allowed?autoAck=true&wait=false";
    let answer = send(&b, Method::GET, path, &app, None).await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
    assert_eq!(answer.1["messages"].as_array().map(Vec::len), Some(1));
    let other = [
        ("origin", "http://app.example:3001"),
        ("sec-fetch-site", "same-site"),
    ];
    let answer = send(&b, Method::GET, path, &other, None).await;
    assert_eq!(answer.0, StatusCode::FORBIDDEN, "{}", answer.1);

    // CORS for the allowed origin: its preflight is answered, and so are its JSON posts,
    // readable by its scripts; another origin's preflight is refused.
    let preflight = |origin: &'static str| {
        b.http
            .request(Method::OPTIONS, b.at("/api/v1/push"))
            .header("origin", origin)
            .header("sec-fetch-site", "cross-site")
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type")
            .send()
    };
    let r = preflight("http://app.example:3000")
        .await
        .expect("preflight");
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "http://app.example:3000");
    assert!(h["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));
    assert!(h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("content-type"));
    let r = preflight("http://evil.example").await.expect("preflight");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let r = b
        .http
        .post(b.at("/api/v1/push"))
        .header("origin", "http://app.example:3000")
        .header("sec-fetch-site", "cross-site")
        .json(&json!({"items": [{"queue": "allowed", "partition": "p", "payload": 2}]}))
        .send()
        .await
        .expect("push");
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://app.example:3000"
    );
    // No CORS headers for clients that are no browser.
    let r = b.http.get(b.at("/health")).send().await.expect("health");
    assert!(r.headers().get("access-control-allow-origin").is_none());

    let port = b.url.rsplit(':').next().expect("port").to_string();
    let named = format!("queen.example.com:{port}");
    let answer = send(&b, Method::GET, "/health", &[("host", &named)], None).await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);

    // The dashboard: same-origin fetches, JSON posts, and body-less POSTs and DELETEs.
    let host = b.url.trim_start_matches("http://").to_string();
    let own = format!("http://{host}");
    let dashboard = [("origin", own.as_str()), ("sec-fetch-site", "same-origin")];
    let answer = send(
        &b,
        Method::POST,
        "/api/v1/system/maintenance",
        &dashboard,
        Some(("application/json", r#"{"enabled":false}"#)),
    )
    .await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
    let answer = send(
        &b,
        Method::GET,
        "/api/v1/resources/queues",
        &dashboard,
        None,
    )
    .await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
    let answer = send(
        &b,
        Method::DELETE,
        "/api/v1/dlq?queue=allowed",
        &dashboard,
        None,
    )
    .await;
    assert!(answer.0.is_success(), "{}: {}", answer.0, answer.1);
}

#[tokio::test]
async fn unusable_entries_do_not_boot() {
    let pg = common::fresh_database().await;
    let mut cfg = common::test_config();
    cfg.browser.allowed_origins = vec!["app.example".into()];
    let err = match queen_broker::server::start(cfg, pg).await {
        Ok(running) => {
            running.shutdown().await;
            panic!("booted with an origin that is none");
        }
        Err(e) => e.to_string(),
    };
    assert!(err.contains("QUEEN_ALLOWED_ORIGINS"), "{err}");
}

/// What booting a broker on `host` with `tweak` logs (on this thread: the test's runtime has
/// one, and the warning is written before `start` returns).
async fn boot_log(host: &str, tweak: impl FnOnce(&mut queen_broker::config::Config)) -> String {
    let out = Captured::default();
    let subscriber = queen_broker::logging::subscriber(
        LogFormat::Text,
        EnvFilter::new("warn"),
        false,
        out.clone(),
    );
    let _guard = tracing::subscriber::set_default(subscriber);
    let b = common::broker_with(|cfg| {
        cfg.host = host.into();
        tweak(cfg);
    })
    .await;
    b.stop().await;
    let bytes = out.0.lock().expect("log buffer").clone();
    String::from_utf8(bytes).expect("utf-8 log")
}

#[tokio::test]
async fn auth_off_on_a_public_address_is_announced_at_boot() {
    let open = boot_log("0.0.0.0", |_| {}).await;
    assert!(
        open.contains("authentication is off") && open.contains("JWT_ENABLED=true"),
        "{open}"
    );
    let loopback = boot_log("127.0.0.1", |_| {}).await;
    assert!(!loopback.contains("authentication is off"), "{loopback}");
    let authed = boot_log("0.0.0.0", crate::auth::with_secret).await;
    assert!(!authed.contains("authentication is off"), "{authed}");
}
