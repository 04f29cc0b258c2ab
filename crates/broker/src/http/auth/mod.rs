//! Bearer-token authentication and role checks (docs/wire.md §1; README "Authentication").
//!
//! With `JWT_ENABLED` the [`authenticate`] layer runs on every routed request: it looks the
//! route up in the one route → role table ([`access`]), lets public routes and
//! `JWT_SKIP_PATHS` through, verifies the bearer token ([`token`], keys from the secret, a
//! PEM key or a JWKS document, [`jwks`]) and checks the token's role. A refusal is a 401
//! (no usable token) or a 403 (a role too weak), through `http/error.rs`. The caller's
//! [`Principal`] then rides in the request's extensions: handlers that stamp the producer
//! identity take it with the [`Producer`] extractor. With auth off nothing is checked and
//! there is no principal, so `producerSub` is null.

pub mod access;
mod jwks;
mod token;

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::{JwtConfig, MetricsAccess, SkipPath};
use crate::error::{Error, Result};
use access::{Access, Role};
use queen_proto::tenant::Tenant;
use token::Verifier;

/// Who a verified token says the caller is.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The token's `sub`: stamped on every message this caller pushes (`producerSub`).
    pub sub: Arc<str>,
    /// The granted role (the `role` claim's, or `JWT_DEFAULT_ROLE` without one), or why there
    /// is none.
    pub role: Result<Role, NoRole>,
    /// The tenant the caller acts for: the token's `tenant` claim, absent → the default.
    pub tenant: Tenant,
}

/// Why a token grants no role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRole {
    /// Its `role` claim names none of the roles.
    Unknown(String),
    /// It has no `role` claim and `JWT_DEFAULT_ROLE` is `none`.
    Missing,
}

/// The authentication settings the layer runs with.
pub struct Auth {
    /// `None` when auth is off.
    verifier: Option<Verifier>,
    skip_paths: Vec<SkipPath>,
    /// What `/metrics` and `/metrics/prometheus` ask of a caller (`QUEEN_METRICS_ACCESS`).
    metrics: Access,
}

impl Auth {
    /// The layer's state for `cfg`; a configuration that cannot work is refused with the
    /// reason (the broker does not start).
    pub fn from_config(cfg: &JwtConfig, metrics: MetricsAccess) -> Result<Arc<Auth>, String> {
        let verifier = cfg.enabled.then(|| Verifier::new(cfg)).transpose()?;
        Ok(Arc::new(Auth {
            verifier,
            skip_paths: cfg.skip_rules()?,
            metrics: access::metrics(metrics),
        }))
    }

    /// `JWT_SKIP_PATHS`: `GET`/`HEAD` (or the entry's method) of an exact path, or of every
    /// path under an entry that ends with `/`.
    fn skipped(&self, method: &str, path: &str) -> bool {
        self.skip_paths
            .iter()
            .any(|skip| skip.matches(method, path))
    }
}

/// The layer (installed with `route_layer`, so the matched route template is known).
pub async fn authenticate(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    let Some(verifier) = &auth.verifier else {
        return next.run(req).await;
    };
    let access = match req.extensions().get::<MatchedPath>() {
        Some(template) if access::METRICS_ROUTES.contains(&template.as_str()) => Some(auth.metrics),
        Some(template) => access::required(req.method().as_str(), template.as_str()),
        None => Some(Access::Needs(Role::Admin)),
    };
    let needed = match access {
        None | Some(Access::Public) => return next.run(req).await,
        Some(Access::Needs(role)) => role,
    };
    if auth.skipped(req.method().as_str(), req.uri().path()) {
        return next.run(req).await;
    }
    match authorize(verifier, req.headers(), needed).await {
        Ok(principal) => {
            req.extensions_mut().insert(principal);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

/// The caller behind the request's bearer token, if its role reaches `needed`.
async fn authorize(verifier: &Verifier, headers: &HeaderMap, needed: Role) -> Result<Principal> {
    let principal = verifier.verify(bearer(headers)?).await?;
    match &principal.role {
        Ok(role) if *role >= needed => Ok(principal),
        Ok(role) => Err(Error::Forbidden(format!(
            "this route needs the {needed} role; the token's role is {role}"
        ))),
        Err(NoRole::Unknown(claim)) => Err(Error::Forbidden(format!(
            "this route needs the {needed} role; the token's role {claim:?} is none of \
             read-only, read-write, admin"
        ))),
        Err(NoRole::Missing) => Err(Error::Forbidden(format!(
            "this route needs the {needed} role; the token has no role claim, and \
             JWT_DEFAULT_ROLE grants none"
        ))),
    }
}

/// The token of `Authorization: Bearer <token>`.
fn bearer(headers: &HeaderMap) -> Result<&str> {
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| {
        Error::Unauthenticated("missing bearer token: send Authorization: Bearer <jwt>".into())
    })?;
    let malformed =
        || Error::Unauthenticated("malformed Authorization header: expected Bearer <jwt>".into());
    let text = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = text.trim().split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(malformed());
    }
    Ok(token)
}

/// The validated `sub` of the caller, stamped on what it pushes: `None` with auth off (and
/// on public or skipped routes), so a body can never choose the producer identity.
#[derive(Debug, Clone)]
pub struct Producer(pub Option<Arc<str>>);

impl<S: Send + Sync> FromRequestParts<S> for Producer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(Producer(
            parts.extensions.get::<Principal>().map(|p| p.sub.clone()),
        ))
    }
}

/// The tenant the caller acts for (README "Tenants"): its token's, or the default tenant
/// with auth off (and on public or skipped routes, which carry no token). Every handler that
/// reads or writes queue data takes it and hands it to the engine.
#[derive(Debug, Clone)]
pub struct CallerTenant(pub Tenant);

impl<S: Send + Sync> FromRequestParts<S> for CallerTenant {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(CallerTenant(
            parts
                .extensions
                .get::<Principal>()
                .map(|p| p.tenant.clone())
                .unwrap_or_default(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn bearer_forms() {
        assert_eq!(bearer(&headers("Bearer a.b.c")).ok(), Some("a.b.c"));
        assert_eq!(bearer(&headers("bearer  a.b.c ")).ok(), Some("a.b.c"));
        for bad in ["Basic dTpw", "Bearer", "Bearer  ", "a.b.c"] {
            let e = bearer(&headers(bad)).expect_err(bad).to_string();
            assert!(e.starts_with("malformed"), "{bad}: {e}");
        }
        let missing = bearer(&HeaderMap::new()).expect_err("missing").to_string();
        assert!(missing.starts_with("missing"), "{missing}");
    }

    #[test]
    fn skip_paths() {
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            jwt: JwtConfig,
        }
        let cfg = <Serve as clap::Parser>::parse_from([
            "queen",
            "--jwt-skip-paths",
            "/api/v1/status,/open/, post /api/v1/push",
        ])
        .jwt;
        let auth = Auth {
            verifier: None,
            skip_paths: cfg.skip_rules().expect("valid entries"),
            metrics: Access::Public,
        };
        assert!(auth.skipped("GET", "/api/v1/status"));
        assert!(auth.skipped("HEAD", "/api/v1/status"));
        assert!(!auth.skipped("GET", "/api/v1/status/x"));
        assert!(auth.skipped("GET", "/open/a/b"));
        assert!(
            !auth.skipped("DELETE", "/open/a/b"),
            "a plain path skips reads only"
        );
        assert!(!auth.skipped("POST", "/open/a"));
        assert!(!auth.skipped("GET", "/opener"));
        assert!(auth.skipped("POST", "/api/v1/push"));
        assert!(!auth.skipped("GET", "/api/v1/push"));
    }
}
