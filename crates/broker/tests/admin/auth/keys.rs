//! Key sources: RS256 with a PEM public key (as text and as a file path), ES256 with keys from
//! a JWKS document served by an in-test HTTP server — fetched on first use, picked by `kid`,
//! refetched when a token names a new `kid` after a rotation (the old key then stops
//! working), and never refetched more than once per `JWT_JWKS_MIN_REFETCH_MS` however many
//! tokens with made-up kids arrive. A key never verifies another algorithm.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::routing::get as route_get;
use axum::Router;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey};
use reqwest::StatusCode;

use super::{claims, fixture, get, sign};
use crate::common;

const LISTING: &str = "/api/v1/resources/queues";

fn rsa() -> EncodingKey {
    EncodingKey::from_rsa_pem(fixture("auth_rsa_private.pem").as_bytes()).expect("RSA key")
}

fn ec(n: u8) -> EncodingKey {
    EncodingKey::from_ec_pem(fixture(&format!("auth_ec{n}_private.pem")).as_bytes())
        .expect("EC key")
}

#[tokio::test]
async fn rs256_with_a_pem_key() {
    let b = common::broker_with(|cfg| {
        cfg.jwt.enabled = true;
        cfg.jwt.public_key = Some(fixture("auth_rsa_public.pem"));
        cfg.jwt.require_audience = Some(false);
    })
    .await;
    let good = sign(
        Algorithm::RS256,
        &rsa(),
        None,
        &claims("rs", Some("read-only")),
    );
    let r = get(&b, LISTING, &good).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    // The public key is no HMAC secret (algorithm confusion), and HS256 is not accepted.
    let confused = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(fixture("auth_rsa_public.pem").as_bytes()).expect("key"),
        None,
        &claims("eve", Some("admin")),
    );
    get(&b, LISTING, &confused)
        .await
        .assert_401("HS256 is not accepted");
    // An ES256 token has no key here.
    let es = sign(
        Algorithm::ES256,
        &ec(1),
        None,
        &claims("es", Some("read-only")),
    );
    get(&b, LISTING, &es).await.assert_401("no ES256 key");
}

#[tokio::test]
async fn es256_with_a_pem_file() {
    let path = format!(
        "{}/tests/fixtures/auth_ec1_public.pem",
        env!("CARGO_MANIFEST_DIR")
    );
    let b = common::broker_with(|cfg| {
        cfg.jwt.enabled = true;
        cfg.jwt.public_key = Some(path);
        cfg.jwt.require_audience = Some(false);
    })
    .await;
    let good = sign(
        Algorithm::ES256,
        &ec(1),
        None,
        &claims("es", Some("read-only")),
    );
    assert_eq!(get(&b, LISTING, &good).await.status, StatusCode::OK);
    let other = sign(
        Algorithm::ES256,
        &ec(2),
        None,
        &claims("es", Some("read-only")),
    );
    get(&b, LISTING, &other).await.assert_401("bad signature");
}

/// A JWKS endpoint whose document the test can swap, counting its fetches.
struct JwksServer {
    url: String,
    doc: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(keys: &[(&str, &EncodingKey)]) -> JwksServer {
        let doc = Arc::new(Mutex::new(document(keys)));
        let fetches = Arc::new(AtomicUsize::new(0));
        let state = (doc.clone(), fetches.clone());
        let app = Router::new()
            .route("/jwks.json", route_get(serve))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/jwks.json", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        JwksServer { url, doc, fetches }
    }

    fn publish(&self, keys: &[(&str, &EncodingKey)]) {
        *self.doc.lock().expect("doc") = document(keys);
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

type Served = (Arc<Mutex<String>>, Arc<AtomicUsize>);

async fn serve(State((doc, fetches)): State<Served>) -> String {
    fetches.fetch_add(1, Ordering::SeqCst);
    doc.lock().expect("doc").clone()
}

/// The JWKS document of the public halves of `keys`, each under its kid.
fn document(keys: &[(&str, &EncodingKey)]) -> String {
    let keys = keys
        .iter()
        .map(|(kid, key)| {
            let mut jwk = Jwk::from_encoding_key(key, Algorithm::ES256).expect("jwk");
            jwk.common.key_id = Some(kid.to_string());
            jwk
        })
        .collect();
    serde_json::to_string(&JwkSet { keys }).expect("json")
}

#[tokio::test]
async fn es256_through_jwks_with_rotation_and_a_refetch_limit() {
    let (k1, k2) = (ec(1), ec(2));
    let server = JwksServer::start(&[("k1", &k1)]).await;
    let b = common::broker_with(|cfg| {
        cfg.jwt.enabled = true;
        cfg.jwt.jwks_url = Some(server.url.clone());
        cfg.jwt.jwks_allow_http = true;
        cfg.jwt.require_audience = Some(false);
        cfg.jwt.jwks_min_refetch_ms = 1000;
    })
    .await;
    assert_eq!(server.fetches(), 0, "fetched on first use, not at boot");
    let first = sign(
        Algorithm::ES256,
        &k1,
        Some("k1"),
        &claims("a", Some("read-only")),
    );
    let r = get(&b, LISTING, &first).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = get(&b, LISTING, &first).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(server.fetches(), 1, "cached after the first fetch");
    // No kid: the document's only ES256 key.
    let unnamed = sign(Algorithm::ES256, &k1, None, &claims("a", Some("read-only")));
    assert_eq!(get(&b, LISTING, &unnamed).await.status, StatusCode::OK);

    // A flood of made-up kids right after a fetch: all refused, no fetch at all.
    flood(&b, "early").await;
    assert_eq!(server.fetches(), 1, "refetches are rate-limited");

    // Rotation: the document now holds k2 only; a k2 token refetches it (once the minimum
    // interval since the last fetch has passed) and is accepted; k1 is then unknown.
    server.publish(&[("k2", &k2)]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = sign(
        Algorithm::ES256,
        &k2,
        Some("k2"),
        &claims("b", Some("read-only")),
    );
    let r = get(&b, LISTING, &second).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(server.fetches(), 2);
    get(&b, LISTING, &first)
        .await
        .assert_401("no key with kid \"k1\"");
    flood(&b, "late").await;
    assert_eq!(server.fetches(), 2, "still within the minimum interval");

    // After the interval one made-up kid costs one fetch, and the next ones none.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    flood(&b, "after").await;
    assert_eq!(server.fetches(), 3, "one refetch per interval");

    // A key of the document never verifies another key's signature.
    let lying = sign(
        Algorithm::ES256,
        &k1,
        Some("k2"),
        &claims("c", Some("read-only")),
    );
    get(&b, LISTING, &lying).await.assert_401("bad signature");
}

/// Twenty concurrent requests with tokens naming kids the document does not have.
async fn flood(b: &common::TestBroker, tag: &str) {
    let key = ec(2);
    let calls = (0..20).map(|i| {
        let tok = sign(
            Algorithm::ES256,
            &key,
            Some(&format!("{tag}-{i}")),
            &claims("flood", Some("read-only")),
        );
        async move { get(b, LISTING, &tok).await }
    });
    for r in futures::future::join_all(calls).await {
        r.assert_401("no key with kid");
    }
}
