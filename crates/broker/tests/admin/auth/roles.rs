//! The route → role table (`http/auth/access.rs`, README "Roles") swept over real HTTP: every
//! row with every role (a weaker role gets a 403 naming the role needed, a sufficient one is
//! let through to the handler), a token without a role claim has `JWT_DEFAULT_ROLE` (none by
//! default), an unknown role is
//! refused everywhere, and every route the source registers is in the table.

use queen_broker::config::DefaultRole;
use queen_broker::http::auth::access::{Access, Role, ROUTES};
use reqwest::{Method, StatusCode};
use serde_json::json;

use super::{call, claims, get, hs256, hs_broker, post, token};

/// A concrete path for a route template.
fn concrete(template: &str) -> String {
    template
        .replace("{queue}", "auth-sweep")
        .replace("{partition}", "p")
        .replace("{group}", "g")
        .replace("{partition_id}", "1")
        .replace("{transaction_id}", "t")
        .replace("{lease_id}", "0198e4c2-0000-7000-8000-000000000000")
}

#[tokio::test]
async fn every_route_with_every_role() {
    let b = hs_broker(|_| {}).await;
    let tokens: Vec<(Role, String)> = Role::ALL
        .iter()
        .map(|&r| (r, token(&format!("sweeper-{r}"), r.name())))
        .collect();
    let body = json!({});
    for route in ROUTES {
        let method = Method::from_bytes(route.method.as_bytes()).expect("method");
        let path = concrete(route.path);
        let with_body = (method != Method::GET).then_some(&body);
        match route.access {
            Access::Public => {
                let r = call(&b, method.clone(), &path, None, with_body).await;
                assert!(
                    !matches!(r.status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN),
                    "{method} {path} is public: {} {}",
                    r.status,
                    r.body
                );
            }
            Access::Needs(needed) => {
                call(&b, method.clone(), &path, None, with_body)
                    .await
                    .assert_401("missing bearer token");
                for (role, tok) in &tokens {
                    let r = call(&b, method.clone(), &path, Some(tok), with_body).await;
                    if *role >= needed {
                        assert!(
                            !matches!(r.status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN),
                            "{method} {path} with {role}: {} {}",
                            r.status,
                            r.body
                        );
                        assert!(r.status.as_u16() < 500, "{method} {path}: {}", r.body);
                    } else {
                        assert_eq!(
                            r.status,
                            StatusCode::FORBIDDEN,
                            "{method} {path} with {role}"
                        );
                        let want = format!("needs the {needed} role; the token's role is {role}");
                        assert!(r.error().contains(&want), "{method} {path}: {}", r.body);
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn a_token_without_a_role_has_no_rights_and_an_unknown_role_nothing() {
    let b = hs_broker(|_| {}).await;
    // Any token the key verifies, issued for whatever purpose, reads nothing by default.
    let roleless = hs256(&claims("no-role", None));
    let r = get(&b, "/api/v1/resources/queues", &roleless).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert!(
        r.error().contains("needs the read-only role")
            && r.error().contains("no role claim")
            && r.error().contains("JWT_DEFAULT_ROLE"),
        "{}",
        r.body
    );
    let r = get(&b, "/api/v1/dlq", &roleless).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let push = json!({"items": [{"queue": "roles", "payload": 1}]});
    let r = post(&b, "/api/v1/push", &roleless, &push).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Public routes stay public.
    let r = get(&b, "/health", &roleless).await;
    assert_eq!(r.status, StatusCode::OK);

    // JWT_DEFAULT_ROLE grants a role to such tokens; a role claim still wins.
    let readers = hs_broker(|cfg| cfg.jwt.default_role = DefaultRole::ReadOnly).await;
    let r = get(&readers, "/api/v1/resources/queues", &roleless).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = post(&readers, "/api/v1/push", &roleless, &push).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        r.error().contains("needs the read-write role"),
        "{}",
        r.body
    );
    let r = post(&readers, "/api/v1/push", &token("w", "read-write"), &push).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);

    let odd = token("odd", "superuser");
    let r = get(&b, "/api/v1/resources/queues", &odd).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        r.error().contains("needs the read-only role")
            && r.error().contains("\"superuser\" is none of"),
        "{}",
        r.body
    );

    // The official client stops a consume loop on 403; a pop with a read-only token is one.
    let reader = token("reader", "read-only");
    let r = get(&b, "/api/v1/pop/queue/roles?wait=false", &reader).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post(&b, "/api/v1/push", &token("writer", "read-write"), &push).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = post(
        &b,
        "/api/v1/configure",
        &token("writer", "read-write"),
        &json!({"queue": "roles"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "configure is admin's");
    assert!(r.error().contains("needs the admin role"), "{}", r.body);
}

/// Every `.route("…")` of `src/http` must be in the table: a new route without a row would
/// fall to the fail-closed default (admin) unnoticed.
#[test]
fn every_registered_route_is_in_the_table() {
    let dir = format!("{}/src/http", env!("CARGO_MANIFEST_DIR"));
    let mut registered = Vec::new();
    collect_routes(std::path::Path::new(&dir), &mut registered);
    assert!(registered.len() > 30, "found only {registered:?}");
    for path in &registered {
        assert!(
            ROUTES.iter().any(|r| r.path == path),
            "route {path} is registered but not in http/auth/access.rs"
        );
    }
}

fn collect_routes(dir: &std::path::Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            collect_routes(&path, out);
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        for (at, _) in text.match_indices(".route(") {
            let rest = text[at + ".route(".len()..].trim_start();
            if let Some(literal) = rest.strip_prefix('"') {
                let end = literal.find('"').expect("closing quote");
                out.push(literal[..end].to_string());
            }
        }
    }
}
