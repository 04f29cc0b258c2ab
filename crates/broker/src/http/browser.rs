//! The browser guard (docs/wire.md §1.4, README "Browsers"): what keeps a web page a user
//! merely opens from driving the broker through the user's browser. Every request passes it,
//! before authentication:
//!
//! - **cross-site requests**: a request a browser marks as coming from another site
//!   (`Sec-Fetch-Site: cross-site` or `same-site`, an `<img>` tag's GET included), or, from a
//!   browser that sends no `Sec-Fetch-Site`, whose `Origin` is not the broker's own (its
//!   `Host`), is refused with 403 unless that origin is in `QUEEN_ALLOWED_ORIGINS`;
//! - **DNS rebinding** (auth off only: with auth on a page has no token to send): a request
//!   naming a `Host` the broker does not answer to is refused with 403. It answers to IP
//!   addresses, `localhost` and `*.localhost`, names without a dot, its `HOST` setting and
//!   `QUEEN_ALLOWED_HOSTS`: a rebinding page's requests name the attacker's own DNS name;
//! - **content types**: a request that may change something (any method but GET, HEAD,
//!   OPTIONS) declaring a content type must declare JSON (`application/json`,
//!   `application/*+json`; push and transaction also `application/x-queen-push`), else 415;
//!   without one its body must be empty. A form or a `text/plain` body, which a page may post
//!   anywhere without asking, never reaches a handler.
//!
//! Clients that are no browser (the official clients, `curl`) send no `Origin` and no
//! `Sec-Fetch-*` headers and are unaffected by the first rule; the dashboard is same-origin.
//! Answers to an allowed origin carry CORS headers (`Access-Control-Allow-Origin`, and a 204
//! to its preflights), so its scripts may send JSON and tokens and read the answers.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::extract;
use crate::config::Config;

/// The routes that also take the binary push body.
const BINARY_ROUTES: [&str; 2] = ["/api/v1/push", "/api/v1/transaction"];

/// The guard's settings, fixed at boot.
pub struct Guard {
    /// `QUEEN_ALLOWED_ORIGINS`, normalised; `None`: `*`, every origin.
    origins: Option<Vec<String>>,
    /// `Some` with auth off: the host names answered besides the built-in ones (`HOST` and
    /// `QUEEN_ALLOWED_HOSTS`); an entry `.x` covers every name under `x`. `None`: every host
    /// (auth on, or `*`).
    hosts: Option<Vec<String>>,
}

impl Guard {
    /// The guard `cfg` describes; an entry that is not an origin or a host is refused.
    pub fn from_config(cfg: &Config) -> Result<Arc<Guard>, String> {
        cfg.browser.check()?;
        let origins = cfg.browser.origins();
        let mut hosts = cfg.browser.hosts();
        hosts.push(cfg.host.trim().to_ascii_lowercase());
        let any_host = cfg.jwt.enabled || hosts.iter().any(|h| h == "*");
        Ok(Arc::new(Guard {
            origins: (!origins.iter().any(|o| o == "*")).then_some(origins),
            hosts: (!any_host).then_some(hosts),
        }))
    }

    /// Why a request must not be served, or `None`.
    fn refusal(&self, method: &Method, route: &str, headers: &HeaderMap) -> Option<Refusal> {
        let host = text(headers, header::HOST);
        if let (Some(allowed), Some(host)) = (&self.hosts, host) {
            let name = host_name(host);
            if !answers_to(allowed, &name) {
                return Some(Refusal::forbidden(
                    "host_not_allowed",
                    format!(
                        "this broker does not answer to the host {name:?} with auth off (a \
                         guard against DNS rebinding): add it to QUEEN_ALLOWED_HOSTS, or turn \
                         on JWT_ENABLED"
                    ),
                ));
            }
        }
        let (origin, foreign) = foreign(headers);
        if foreign && !self.origin_allowed(origin.as_deref()) {
            let from = origin
                .as_deref()
                .unwrap_or("another site (no Origin header)");
            return Some(Refusal::forbidden(
                "cross_site_refused",
                format!(
                    "cross-site request from {from} refused: a web page may only call this \
                     broker from an origin listed in QUEEN_ALLOWED_ORIGINS"
                ),
            ));
        }
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        match text(headers, header::CONTENT_TYPE) {
            Some(ct) if is_json(ct) => None,
            Some(_) if BINARY_ROUTES.contains(&route) && extract::is_binary(headers) => None,
            Some(ct) => Some(Refusal {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code: "unsupported_media_type",
                message: format!(
                    "Content-Type {ct:?} is not accepted: send application/json{}",
                    if BINARY_ROUTES.contains(&route) {
                        format!(" or {}", extract::CONTENT_TYPE)
                    } else {
                        String::new()
                    }
                ),
            }),
            None if has_body(headers) => Some(Refusal {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code: "unsupported_media_type",
                message: "a body without a Content-Type: send Content-Type: application/json"
                    .into(),
            }),
            None => None,
        }
    }

    fn origin_allowed(&self, origin: Option<&str>) -> bool {
        match (&self.origins, origin) {
            (None, _) => true,
            (Some(allowed), Some(origin)) => allowed.iter().any(|a| a == origin),
            (Some(_), None) => false,
        }
    }
}

/// The request's `Origin` (lower case), and whether the request comes from another site.
fn foreign(headers: &HeaderMap) -> (Option<String>, bool) {
    let origin = text(headers, header::ORIGIN).map(|o| o.trim().to_ascii_lowercase());
    let site = text(headers, "sec-fetch-site").map(str::to_ascii_lowercase);
    let own = match (&origin, text(headers, header::HOST)) {
        (Some(origin), Some(host)) => authority(origin) == Some(&host.to_ascii_lowercase()),
        _ => false,
    };
    // A browser's own word wins (a page cannot set `Sec-` headers): behind a proxy that
    // rewrites `Host`, the dashboard's `Origin` no longer matches it, but it is same-origin.
    let foreign = match site.as_deref() {
        Some("cross-site" | "same-site") => true,
        Some("same-origin" | "none") => false,
        _ => origin.is_some() && !own,
    };
    (origin, foreign)
}

/// One refusal, rendered as `{"error", "code"}`.
struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Refusal {
    fn forbidden(code: &'static str, message: String) -> Refusal {
        Refusal {
            status: StatusCode::FORBIDDEN,
            code,
            message,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "error": self.message, "code": self.code })),
        )
            .into_response()
    }
}

/// The layer (installed with `Router::layer`, so the matched route is known).
pub async fn guard(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path(), MatchedPath::as_str);
    if let Some(refusal) = guard.refusal(req.method(), route, req.headers()) {
        return refusal.into_response();
    }
    // Past the refusal, a request from another site comes from an allowed origin: CORS lets
    // that origin's scripts send preflighted requests and read the answers.
    let allowed = match foreign(req.headers()) {
        (Some(_), true) => req.headers().get(header::ORIGIN).cloned(),
        _ => None,
    };
    let Some(origin) = allowed else {
        return next.run(req).await;
    };
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, HEAD, POST, DELETE"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(PREFLIGHT_MAX_AGE_S),
        );
        r
    } else {
        let mut r = next.run(req).await;
        r.headers_mut().insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("retry-after"),
        );
        r
    };
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.append(header::VARY, HeaderValue::from_static("origin"));
    response
}

/// Seconds a browser may keep a preflight's answer.
const PREFLIGHT_MAX_AGE_S: &str = "600";

fn text(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `application/json` or `application/<anything>+json`, parameters ignored.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.len() > 5 && sub.ends_with("+json"))
}

/// Whether the request announces a body: a non-zero `Content-Length`, or chunks.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || text(headers, header::CONTENT_LENGTH).is_some_and(|n| n.trim() != "0")
}

/// The `host[:port]` of an origin `scheme://host[:port]`.
fn authority(origin: &str) -> Option<&str> {
    origin.split_once("://").map(|(_, rest)| rest)
}

/// The name of a `Host` header, without its port and brackets, lower case.
fn host_name(host: &str) -> String {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether the broker answers to host `name` with auth off.
fn answers_to(allowed: &[String], name: &str) -> bool {
    name.parse::<IpAddr>().is_ok()
        || !name.contains('.')
        || name.ends_with(".localhost")
        || allowed.iter().any(|a| {
            a == name
                || a.strip_prefix('.')
                    .is_some_and(|suffix| name.ends_with(a.as_str()) || name == suffix)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(origins: Option<&[&str]>, hosts: Option<&[&str]>) -> Guard {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Guard {
            origins: origins.map(own),
            hosts: hosts.map(own),
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn code(
        g: &Guard,
        method: Method,
        route: &str,
        h: &[(&'static str, &'static str)],
    ) -> &'static str {
        g.refusal(&method, route, &headers(h))
            .map_or("ok", |r| r.code)
    }

    #[test]
    fn cross_site_requests_need_an_allowed_origin() {
        let g = guard(Some(&["http://app.test:3000"]), None);
        let pop = "/api/v1/pop/queue/{queue}";
        let host = ("host", "127.0.0.1:6632");
        assert_eq!(code(&g, Method::GET, pop, &[host]), "ok", "no browser");
        let img = [host, ("sec-fetch-site", "cross-site")];
        assert_eq!(code(&g, Method::GET, pop, &img), "cross_site_refused");
        let evil = [host, ("origin", "http://evil.test")];
        assert_eq!(code(&g, Method::GET, pop, &evil), "cross_site_refused");
        let null = [host, ("origin", "null")];
        assert_eq!(code(&g, Method::GET, pop, &null), "cross_site_refused");
        let same = [
            host,
            ("origin", "http://127.0.0.1:6632"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert_eq!(code(&g, Method::GET, pop, &same), "ok", "the dashboard");
        let proxied = [
            ("host", "queen:6632"),
            ("origin", "https://queen.example.com"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert_eq!(
            code(&g, Method::POST, "/api/v1/dlq", &proxied),
            "ok",
            "Host rewritten"
        );
        let old_browser = [
            ("host", "queen:6632"),
            ("origin", "https://queen.example.com"),
        ];
        assert_eq!(
            code(&g, Method::POST, "/api/v1/dlq", &old_browser),
            "cross_site_refused",
            "without Sec-Fetch-Site, Origin must match Host"
        );
        let typed = [host, ("sec-fetch-site", "none")];
        assert_eq!(code(&g, Method::GET, pop, &typed), "ok", "a typed URL");
        let app = [
            host,
            ("origin", "http://app.test:3000"),
            ("sec-fetch-site", "same-site"),
        ];
        assert_eq!(code(&g, Method::GET, pop, &app), "ok");
        let any = guard(None, None);
        assert_eq!(
            code(&any, Method::GET, pop, &evil),
            "ok",
            "QUEEN_ALLOWED_ORIGINS=*"
        );
    }

    #[test]
    fn writes_must_declare_json() {
        let g = guard(Some(&[]), None);
        let push = "/api/v1/push";
        let json = [("content-type", "application/json; charset=utf-8")];
        assert_eq!(code(&g, Method::POST, push, &json), "ok");
        let problem = [("content-type", "application/problem+json")];
        assert_eq!(code(&g, Method::POST, push, &problem), "ok");
        let binary = [("content-type", "application/x-queen-push")];
        assert_eq!(code(&g, Method::POST, push, &binary), "ok");
        let maintenance = "/api/v1/system/maintenance";
        assert_eq!(
            code(&g, Method::POST, maintenance, &binary),
            "unsupported_media_type",
            "binary bodies are for push and transaction"
        );
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            "application/+json",
        ] {
            let h = [("content-type", ct)];
            assert_eq!(
                code(&g, Method::POST, maintenance, &h),
                "unsupported_media_type",
                "{ct}"
            );
        }
        assert_eq!(
            code(
                &g,
                Method::GET,
                "/health",
                &[("content-type", "text/plain")]
            ),
            "ok"
        );
        let empty = [("content-length", "0")];
        assert_eq!(
            code(&g, Method::POST, "/api/v1/stats/refresh", &empty),
            "ok"
        );
        assert_eq!(code(&g, Method::DELETE, "/api/v1/dlq", &[]), "ok");
        let untyped = [("content-length", "17")];
        assert_eq!(
            code(&g, Method::POST, maintenance, &untyped),
            "unsupported_media_type"
        );
        let chunked = [("transfer-encoding", "chunked")];
        assert_eq!(
            code(&g, Method::POST, maintenance, &chunked),
            "unsupported_media_type"
        );
    }

    #[test]
    fn hosts_with_auth_off() {
        let g = guard(
            Some(&[]),
            Some(&["queen.example.com", ".svc.cluster.local", "0.0.0.0"]),
        );
        for ok in [
            "127.0.0.1:6632",
            "[::1]:6632",
            "10.1.2.3",
            "localhost:6632",
            "LOCALHOST.",
            "app.localhost:6632",
            "queen:6632",
            "queen.example.com:6632",
            "queen.default.svc.cluster.local",
        ] {
            let h = [("host", ok)];
            assert_eq!(code(&g, Method::GET, "/health", &h), "ok", "{ok}");
        }
        for bad in [
            "evil.example:6632",
            "queen.example.com.evil.test",
            "xsvc.cluster.local",
        ] {
            let h = [("host", bad)];
            assert_eq!(
                code(&g, Method::GET, "/health", &h),
                "host_not_allowed",
                "{bad}"
            );
        }
        let auth_on = guard(Some(&[]), None);
        let h = [("host", "evil.example:6632")];
        assert_eq!(code(&auth_on, Method::GET, "/health", &h), "ok");
    }
}
