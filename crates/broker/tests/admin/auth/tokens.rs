//! Every way a token is refused (401 naming the reason, `WWW-Authenticate: Bearer`, never a
//! 5xx), the clock skew on both sides of its edge, issuer and audience, public routes and
//! `JWT_SKIP_PATHS`, and configurations refused at boot.

use jsonwebtoken::{Algorithm, EncodingKey};
use reqwest::{Method, StatusCode};
use serde_json::json;

use super::{call, claims, fixture, get, hs256, hs_broker, now, sign, token, with_secret};
use crate::common;

const LISTING: &str = "/api/v1/resources/queues";

#[tokio::test]
async fn each_unusable_token_is_a_401_naming_why() {
    let b = hs_broker(|_| {}).await;

    call(&b, Method::GET, LISTING, None, None)
        .await
        .assert_401("missing bearer token");
    let basic = b.http.get(b.at(LISTING)).basic_auth("u", Some("p"));
    super::send(basic)
        .await
        .assert_401("malformed Authorization header");
    get(&b, LISTING, "not-a-jwt")
        .await
        .assert_401("malformed token");
    get(&b, LISTING, "e30.e30.e30")
        .await
        .assert_401("malformed token");

    let forged = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(b"another secret").expect("key"),
        None,
        &claims("eve", Some("admin")),
    );
    get(&b, LISTING, &forged).await.assert_401("bad signature");

    // A signature that is not the token's own (payload swapped after signing).
    let honest = token("alice", "read-only");
    let admin = token("alice", "admin");
    let spliced: Vec<&str> = honest.split('.').collect();
    let claimed: Vec<&str> = admin.split('.').collect();
    let tampered = format!("{}.{}.{}", spliced[0], claimed[1], spliced[2]);
    get(&b, LISTING, &tampered)
        .await
        .assert_401("bad signature");

    let mut no_sub = claims("x", Some("admin"));
    no_sub.as_object_mut().expect("object").remove("sub");
    get(&b, LISTING, &hs256(&no_sub))
        .await
        .assert_401("no sub claim");
    let mut no_exp = claims("x", Some("admin"));
    no_exp.as_object_mut().expect("object").remove("exp");
    get(&b, LISTING, &hs256(&no_exp))
        .await
        .assert_401("no exp claim");
    let mut bad_role = claims("x", None);
    bad_role["role"] = json!(7);
    get(&b, LISTING, &hs256(&bad_role))
        .await
        .assert_401("malformed JSON");

    // An RS256 token where only HS256 is accepted, and the unsigned "none" algorithm.
    let rsa = EncodingKey::from_rsa_pem(fixture("auth_rsa_private.pem").as_bytes()).expect("key");
    let rs = sign(Algorithm::RS256, &rsa, None, &claims("x", Some("admin")));
    get(&b, LISTING, &rs)
        .await
        .assert_401("RS256 is not accepted");
    // base64url of {"alg":"none","typ":"JWT"}, then the admin token's own claims.
    let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.", claimed[1]);
    get(&b, LISTING, &none).await.assert_401("malformed token");

    // The same route with a good token.
    let ok = get(&b, LISTING, &token("alice", "read-only")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
}

#[tokio::test]
async fn expiry_and_not_before_allow_the_clock_skew_and_no_more() {
    let b = hs_broker(|cfg| cfg.jwt.clock_skew_s = 30).await;
    let at = |exp: i64, nbf: Option<i64>| {
        let mut c = claims("clock", Some("read-only"));
        c["exp"] = exp.into();
        if let Some(nbf) = nbf {
            c["nbf"] = nbf.into();
        }
        hs256(&c)
    };
    let within = get(&b, LISTING, &at(now() - 10, None)).await;
    assert_eq!(within.status, StatusCode::OK, "expired 10 s ago, skew 30 s");
    get(&b, LISTING, &at(now() - 90, None))
        .await
        .assert_401("token expired");
    let early = get(&b, LISTING, &at(now() + 600, Some(now() + 10))).await;
    assert_eq!(early.status, StatusCode::OK, "valid in 10 s, skew 30 s");
    get(&b, LISTING, &at(now() + 600, Some(now() + 300)))
        .await
        .assert_401("not valid yet");

    let strict = hs_broker(|cfg| cfg.jwt.clock_skew_s = 0).await;
    get(&strict, LISTING, &at(now() - 10, None))
        .await
        .assert_401("token expired");
}

#[tokio::test]
async fn issuer_and_audience_are_required_once_configured() {
    let b = hs_broker(|cfg| {
        cfg.jwt.issuer = Some("https://idp.test".into());
        cfg.jwt.audience = Some("queen".into());
    })
    .await;
    let with = |iss: Option<&str>, aud: Option<serde_json::Value>| {
        let mut c = claims("svc", Some("read-only"));
        if let Some(iss) = iss {
            c["iss"] = iss.into();
        }
        if let Some(aud) = aud {
            c["aud"] = aud;
        }
        hs256(&c)
    };
    let good = get(
        &b,
        LISTING,
        &with(Some("https://idp.test"), Some(json!("queen"))),
    )
    .await;
    assert_eq!(good.status, StatusCode::OK, "{}", good.body);
    let among = get(
        &b,
        LISTING,
        &with(Some("https://idp.test"), Some(json!(["other", "queen"]))),
    )
    .await;
    assert_eq!(among.status, StatusCode::OK, "one of several audiences");
    get(
        &b,
        LISTING,
        &with(Some("https://evil.test"), Some(json!("queen"))),
    )
    .await
    .assert_401("wrong issuer");
    get(&b, LISTING, &with(None, Some(json!("queen"))))
        .await
        .assert_401("no iss claim");
    get(
        &b,
        LISTING,
        &with(Some("https://idp.test"), Some(json!("billing"))),
    )
    .await
    .assert_401("wrong audience");
    get(&b, LISTING, &with(Some("https://idp.test"), None))
        .await
        .assert_401("no aud claim");

    // Not configured: neither is checked.
    let open = hs_broker(|_| {}).await;
    let any = get(
        &open,
        LISTING,
        &with(Some("anyone"), Some(json!("anything"))),
    )
    .await;
    assert_eq!(any.status, StatusCode::OK, "{}", any.body);
}

#[tokio::test]
async fn public_routes_and_skip_paths_need_no_token() {
    let b = hs_broker(|cfg| {
        cfg.jwt.skip_paths = vec![
            "/api/v1/resources/overview".into(),
            " /api/v1/consumer-groups/".into(),
        ]
    })
    .await;
    for path in [
        "/health",
        "/metrics",
        "/dashboard/",
        "/dashboard/app.js",
        "/api/v1/resources/overview",
        "/api/v1/consumer-groups/lagging",
    ] {
        let r = call(&b, Method::GET, path, None, None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
    }
    // A public route ignores even a bad token; the dashboard's data calls are not public.
    let r = call(&b, Method::GET, "/health", Some("garbage"), None).await;
    assert_eq!(r.status, StatusCode::OK);
    call(&b, Method::GET, "/api/v1/status", None, None)
        .await
        .assert_401("missing bearer token");
    // Unknown paths and methods keep their own answers.
    let r = call(&b, Method::GET, "/api/v1/nothing-here", None, None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = call(&b, Method::PUT, "/api/v1/push", None, None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// A plain skip path opens reading only: skipping the listings under a prefix does not open
/// the admin routes under the same prefix; writes are skipped only by a `METHOD /path` entry.
#[tokio::test]
async fn skip_paths_open_reads_unless_an_entry_names_the_method() {
    let b = hs_broker(|cfg| {
        cfg.jwt.skip_paths = vec![
            "/api/v1/resources/queues/".into(),
            "/api/v1/consumer-groups/".into(),
            "post /api/v1/push".into(),
        ]
    })
    .await;
    let admin = token("admin", "admin");
    let push = json!({"items": [{"queue": "skipped", "partition": "p", "payload": 1}]});
    let r = call(&b, Method::POST, "/api/v1/push", None, Some(&push)).await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "POST /api/v1/push is skipped: {}",
        r.body
    );
    let r = call(
        &b,
        Method::GET,
        "/api/v1/resources/queues/skipped",
        None,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = call(
        &b,
        Method::HEAD,
        "/api/v1/resources/queues/skipped",
        None,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);

    call(
        &b,
        Method::DELETE,
        "/api/v1/resources/queues/skipped",
        None,
        None,
    )
    .await
    .assert_401("missing bearer token");
    call(&b, Method::DELETE, "/api/v1/consumer-groups/g", None, None)
        .await
        .assert_401("missing bearer token");
    let seek = json!({"toEnd": true});
    call(
        &b,
        Method::POST,
        "/api/v1/consumer-groups/g/queues/skipped/seek",
        None,
        Some(&seek),
    )
    .await
    .assert_401("missing bearer token");
    // The queue is still there.
    let r = get(&b, "/api/v1/resources/queues/skipped", &admin).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // A read of a path not listed still needs a token.
    call(&b, Method::GET, "/api/v1/status", None, None)
        .await
        .assert_401("missing bearer token");
}

#[tokio::test]
async fn auth_off_needs_no_token_anywhere() {
    let b = common::broker().await;
    let r = call(&b, Method::GET, LISTING, None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = call(&b, Method::GET, LISTING, Some("garbage"), None).await;
    assert_eq!(r.status, StatusCode::OK, "a token is not even read");
}

type Tweak = dyn Fn(&mut queen_broker::config::Config);

#[tokio::test]
async fn unusable_configurations_do_not_boot() {
    let pg = common::fresh_database().await;
    let cases: Vec<(&str, Box<Tweak>)> = vec![
        (
            "JWT_ENABLED=true needs a key",
            Box::new(|c| c.jwt.enabled = true),
        ),
        (
            "JWT_ALGORITHM names RS256 but JWT_PUBLIC_KEY or JWT_JWKS_URL is not set",
            Box::new(|c| {
                with_secret(c);
                c.jwt.algorithms = vec![queen_broker::config::JwtAlgorithm::Rs256];
            }),
        ),
        (
            "JWT_PUBLIC_KEY: neither PEM text nor a readable file",
            Box::new(|c| {
                c.jwt.enabled = true;
                c.jwt.public_key = Some("/nonexistent/key.pem".into());
                c.jwt.audience = Some("queen".into());
            }),
        ),
        (
            "JWT_PUBLIC_KEY is neither an RSA nor an EC public key",
            Box::new(|c| {
                c.jwt.enabled = true;
                c.jwt.public_key =
                    Some("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n".into());
                c.jwt.audience = Some("queen".into());
            }),
        ),
        (
            "JWT_PUBLIC_KEY is a ES256 key but JWT_ALGORITHM does not accept ES256",
            Box::new(|c| {
                c.jwt.enabled = true;
                c.jwt.public_key = Some(fixture("auth_ec1_public.pem"));
                c.jwt.audience = Some("queen".into());
                c.jwt.algorithms = vec![queen_broker::config::JwtAlgorithm::Rs256];
            }),
        ),
        (
            "must be an http or https URL",
            Box::new(|c| {
                c.jwt.enabled = true;
                c.jwt.jwks_url = Some("file:///etc/jwks.json".into());
                c.jwt.audience = Some("queen".into());
            }),
        ),
        // Keys of an identity provider that also signs other applications' tokens.
        (
            "JWT_AUDIENCE is not set, and the keys are public ones",
            Box::new(|c| {
                c.jwt.enabled = true;
                c.jwt.jwks_url = Some("https://idp.test/.well-known/jwks.json".into());
            }),
        ),
        (
            "JWT_AUDIENCE is not set, and the keys are public ones",
            Box::new(|c| {
                c.jwt.enabled = true;
                c.jwt.public_key = Some(fixture("auth_rsa_public.pem"));
            }),
        ),
        (
            "JWT_JWKS_URL http://idp.test/jwks is http://",
            Box::new(|c| {
                c.jwt.enabled = true;
                c.jwt.audience = Some("queen".into());
                c.jwt.jwks_url = Some("http://idp.test/jwks".into());
            }),
        ),
        (
            "JWT_SKIP_PATHS entry \"OPEN /api/v1/push\"",
            Box::new(|c| {
                with_secret(c);
                c.jwt.skip_paths = vec!["OPEN /api/v1/push".into()];
            }),
        ),
    ];
    for (want, tweak) in cases {
        let mut cfg = common::test_config();
        tweak(&mut cfg);
        let err = match queen_broker::server::start(cfg, pg.clone()).await {
            Ok(running) => {
                running.shutdown().await;
                panic!("booted although {want}");
            }
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "want {want:?}, got {err:?}");
    }
}
