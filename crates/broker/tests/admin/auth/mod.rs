//! JWT authentication against real brokers (docs/wire.md §1, README "Authentication"): every
//! 401 reason, clock skew, issuer and audience, the route → role table swept with each role,
//! HS256, RS256 with a PEM key, ES256 through a JWKS document served by a small in-test HTTP
//! server (rotation and the refetch rate limit included), and the producer identity stamped
//! on JSON, binary and transactional pushes, kept by dead letters, and null with auth off.
//!
//! Keys are test-only fixtures under `tests/fixtures/` (generated with openssl); tokens are
//! minted here with the `jsonwebtoken` crate the broker itself verifies with.

mod keys;
mod producer;
mod roles;
mod tokens;

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use queen_broker::config::Config;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::{self, TestBroker};

/// The HS256 secret of the test brokers.
pub const SECRET: &str = "queen-auth-test-secret-0123456789abcdef";

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// Claims of a token for `sub` with `role` (none: no role claim), valid for ten minutes.
pub fn claims(sub: &str, role: Option<&str>) -> Value {
    let mut c = json!({ "sub": sub, "iat": now(), "exp": now() + 600 });
    if let Some(role) = role {
        c["role"] = role.into();
    }
    c
}

/// A token of `claims` signed with `alg` and `key`, naming `kid` when given.
pub fn sign(alg: Algorithm, key: &EncodingKey, kid: Option<&str>, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, claims, key).expect("encodes")
}

/// An HS256 token of `claims` under [`SECRET`].
pub fn hs256(claims: &Value) -> String {
    let key = EncodingKey::from_secret(SECRET.as_bytes()).expect("key");
    sign(Algorithm::HS256, &key, None, claims)
}

/// An HS256 token for `sub` with `role`.
pub fn token(sub: &str, role: &str) -> String {
    hs256(&claims(sub, Some(role)))
}

/// A key file of `tests/fixtures/`.
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Turns auth on with the HS256 [`SECRET`].
pub fn with_secret(cfg: &mut Config) {
    cfg.jwt.enabled = true;
    cfg.jwt.secret = Some(SECRET.into());
}

/// A broker with HS256 auth on, and `tweak` applied after.
pub async fn hs_broker(tweak: impl FnOnce(&mut Config)) -> TestBroker {
    common::broker_with(|cfg| {
        with_secret(cfg);
        tweak(cfg);
    })
    .await
}

/// What a call answered.
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub www_authenticate: Option<String>,
    pub raw: Vec<u8>,
}

impl Reply {
    /// The `error` text of a refusal.
    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or_default()
    }

    /// Asserts a 401 whose error contains `reason`.
    #[track_caller]
    pub fn assert_401(&self, reason: &str) {
        assert_eq!(self.status, StatusCode::UNAUTHORIZED, "{}", self.body);
        assert!(
            self.error().contains(reason),
            "want {reason:?}: {}",
            self.body
        );
        assert_eq!(self.www_authenticate.as_deref(), Some("Bearer"));
    }
}

/// One request with `token` as bearer (none: no Authorization header) and a JSON body.
pub async fn call(
    b: &TestBroker,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Reply {
    let mut req = b.http.request(method, b.at(path));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(body) = body {
        req = req.json(body);
    }
    send(req).await
}

/// Sends a prepared request and reads the answer.
pub async fn send(req: reqwest::RequestBuilder) -> Reply {
    let r = req.send().await.expect("request");
    let status = r.status();
    let www_authenticate = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap_or_default().to_string());
    let raw = r.bytes().await.expect("body").to_vec();
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Reply {
        status,
        body,
        www_authenticate,
        raw,
    }
}

/// `GET` with a token.
pub async fn get(b: &TestBroker, path: &str, token: &str) -> Reply {
    call(b, Method::GET, path, Some(token), None).await
}

/// `POST` of a JSON body with a token.
pub async fn post(b: &TestBroker, path: &str, token: &str, body: &Value) -> Reply {
    call(b, Method::POST, path, Some(token), Some(body)).await
}
