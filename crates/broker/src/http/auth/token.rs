//! Verifying one bearer token (docs/wire.md §1): its header's algorithm must be accepted, the
//! key comes from the source that algorithm belongs to (the HS256 secret, the PEM key, or the
//! JWKS document by `kid`), and the signature, `exp`/`nbf` (with the configured clock skew),
//! `iss` and `aud` must hold. The answer is the caller's [`Principal`], or the reason the
//! token was refused, in words a client can act on.
//!
//! A key only ever verifies its own algorithm: an RSA public key is never used as an HMAC
//! secret, whatever the token's header says (the classic algorithm-confusion attack).

use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::access::Role;
use super::jwks::{Jwks, Key};
use super::{NoRole, Principal};
use crate::config::{DefaultRole, JwtAlgorithm, JwtConfig};
use crate::error::{Error, Result};
use queen_proto::tenant::Tenant;

/// The claims the broker reads; every other claim is ignored.
#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    role: Option<String>,
    tenant: Option<String>,
}

pub struct Verifier {
    /// One validation per accepted algorithm, in `JWT_ALGORITHM` order.
    validations: Vec<(Algorithm, Validation)>,
    secret: Option<DecodingKey>,
    pem: Option<Arc<Key>>,
    jwks: Option<Jwks>,
    /// The role of a token without a `role` claim (`JWT_DEFAULT_ROLE`).
    default_role: Option<Role>,
}

impl Verifier {
    /// The verifier `cfg` describes; the message says what is wrong with the configuration.
    pub fn new(cfg: &JwtConfig) -> Result<Self, String> {
        cfg.check()?;
        let algorithms: Vec<Algorithm> = cfg.accepted().into_iter().map(algorithm).collect();
        let validations = algorithms
            .iter()
            .map(|&alg| (alg, validation(cfg, alg)))
            .collect();
        let secret = cfg
            .secret
            .as_deref()
            .map(|s| DecodingKey::from_secret(s.as_bytes()).map_err(|e| format!("JWT_SECRET: {e}")))
            .transpose()?;
        let pem = cfg.public_key.as_deref().map(pem_key).transpose()?;
        if let Some(pem) = &pem {
            if !algorithms.contains(&pem.alg) {
                return Err(format!(
                    "JWT_PUBLIC_KEY is a {:?} key but JWT_ALGORITHM does not accept {:?}",
                    pem.alg, pem.alg
                ));
            }
        }
        let jwks = cfg
            .jwks_url
            .as_deref()
            .map(|url| Jwks::new(cfg, url))
            .transpose()?;
        Ok(Verifier {
            validations,
            secret,
            pem: pem.map(Arc::new),
            jwks,
            default_role: match cfg.default_role {
                DefaultRole::None => None,
                DefaultRole::ReadOnly => Some(Role::ReadOnly),
                DefaultRole::ReadWrite => Some(Role::ReadWrite),
                DefaultRole::Admin => Some(Role::Admin),
            },
        })
    }

    /// Verifies `token` and answers who sent it; a refusal is a 401 naming the reason.
    pub async fn verify(&self, token: &str) -> Result<Principal> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| refused(format!("malformed token: {}", reason(e.kind()))))?;
        let Some((_, validation)) = self.validations.iter().find(|(a, _)| *a == header.alg) else {
            let accepted: Vec<String> = self
                .validations
                .iter()
                .map(|(a, _)| format!("{a:?}"))
                .collect();
            return Err(refused(format!(
                "token algorithm {:?} is not accepted (accepted: {})",
                header.alg,
                accepted.join(", ")
            )));
        };
        let key = self.key(header.alg, header.kid.as_deref()).await?;
        let data = jsonwebtoken::decode::<Claims>(token, key.as_ref(), validation)
            .map_err(|e| refused(reason(e.kind())))?;
        principal(data.claims, self.default_role)
    }

    /// The key for a token of algorithm `alg`: the secret for HS256; for RS256/ES256 the
    /// JWKS key the `kid` names, else the PEM key when it is of that algorithm.
    async fn key(&self, alg: Algorithm, kid: Option<&str>) -> Result<KeyRef<'_>> {
        if alg == Algorithm::HS256 {
            return self
                .secret
                .as_ref()
                .map(KeyRef::Borrowed)
                .ok_or_else(|| refused("no HS256 secret is configured"));
        }
        let pem = self.pem.as_ref().filter(|k| k.alg == alg);
        match (&self.jwks, pem) {
            (Some(_), Some(pem)) if kid.is_none() => Ok(KeyRef::Shared(pem.clone())),
            (Some(jwks), _) => jwks
                .key(kid, alg)
                .await
                .map(KeyRef::Shared)
                .map_err(refused),
            (None, Some(pem)) => Ok(KeyRef::Shared(pem.clone())),
            (None, None) => Err(refused(format!("no {alg:?} key is configured"))),
        }
    }
}

/// A key owned by the verifier or shared with the JWKS cache.
enum KeyRef<'a> {
    Borrowed(&'a DecodingKey),
    Shared(Arc<Key>),
}

impl AsRef<DecodingKey> for KeyRef<'_> {
    fn as_ref(&self) -> &DecodingKey {
        match self {
            KeyRef::Borrowed(k) => k,
            KeyRef::Shared(k) => &k.key,
        }
    }
}

fn algorithm(alg: JwtAlgorithm) -> Algorithm {
    match alg {
        JwtAlgorithm::Hs256 | JwtAlgorithm::Auto => Algorithm::HS256,
        JwtAlgorithm::Rs256 => Algorithm::RS256,
        JwtAlgorithm::Es256 => Algorithm::ES256,
    }
}

/// The checks of every token of `alg`: `exp` required, `nbf` honoured, both with the clock
/// skew; `iss` and `aud` required and matched only when configured.
fn validation(cfg: &JwtConfig, alg: Algorithm) -> Validation {
    let mut v = Validation::new(alg);
    v.leeway = cfg.clock_skew_s;
    v.validate_nbf = true;
    let mut required = vec!["exp", "sub"];
    if let Some(iss) = &cfg.issuer {
        v.set_issuer(&[iss]);
        required.push("iss");
    }
    match &cfg.audience {
        Some(aud) => {
            v.set_audience(&[aud]);
            required.push("aud");
        }
        None => v.validate_aud = false,
    }
    v.set_required_spec_claims(&required);
    v
}

/// `JWT_PUBLIC_KEY`: PEM text, or the path of a PEM file; an RSA key verifies RS256, an EC
/// P-256 key ES256. The key is tried once here so a key of another curve fails the boot.
fn pem_key(value: &str) -> Result<Key, String> {
    let text = if value.trim_start().starts_with("-----BEGIN") {
        value.to_string()
    } else {
        std::fs::read_to_string(value)
            .map_err(|e| format!("JWT_PUBLIC_KEY: neither PEM text nor a readable file: {e}"))?
    };
    let key = match DecodingKey::from_rsa_pem(text.as_bytes()) {
        Ok(key) => Key {
            alg: Algorithm::RS256,
            key,
        },
        Err(_) => Key {
            alg: Algorithm::ES256,
            key: DecodingKey::from_ec_pem(text.as_bytes()).map_err(|e| {
                format!("JWT_PUBLIC_KEY is neither an RSA nor an EC public key in PEM: {e}")
            })?,
        },
    };
    jsonwebtoken::crypto::verify("AA", b"probe", &key.key, key.alg)
        .map_err(|e| format!("JWT_PUBLIC_KEY cannot verify {:?}: {e}", key.alg))?;
    Ok(key)
}

/// The caller a verified token names. `sub` is required (it is the producer identity stamped
/// on pushes); a token without a `role` claim has `default_role` (`JWT_DEFAULT_ROLE`, README
/// "Roles"), none by default; a token without a `tenant` claim acts for the default tenant
/// (README "Tenants").
fn principal(claims: Claims, default_role: Option<Role>) -> Result<Principal> {
    let sub = claims
        .sub
        .filter(|s| !s.is_empty())
        .ok_or_else(|| refused("the token's sub claim is empty"))?;
    let role = match claims.role.as_deref() {
        None => default_role.ok_or(NoRole::Missing),
        Some(claim) => Role::parse(claim).ok_or_else(|| NoRole::Unknown(claim.to_string())),
    };
    let tenant = Tenant::parse(claims.tenant.as_deref())
        .map_err(|e| refused(format!("the token's tenant claim is unusable: {e}")))?;
    Ok(Principal {
        sub: sub.into(),
        role,
        tenant,
    })
}

fn refused(reason: impl Into<String>) -> Error {
    Error::Unauthenticated(reason.into())
}

/// Why the library refused a token, said for the client.
fn reason(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::InvalidSignature => "bad signature".into(),
        ErrorKind::ExpiredSignature => "token expired".into(),
        ErrorKind::ImmatureSignature => "token not valid yet (nbf)".into(),
        ErrorKind::InvalidIssuer => "wrong issuer (iss)".into(),
        ErrorKind::InvalidAudience => "wrong audience (aud)".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("token has no {claim} claim"),
        ErrorKind::InvalidClaimFormat(claim) => format!("token claim {claim} has the wrong type"),
        ErrorKind::InvalidAlgorithm => "token algorithm does not match its key".into(),
        ErrorKind::Json(e) => format!("malformed JSON ({e})"),
        ErrorKind::Base64(_) => "not base64url".into(),
        ErrorKind::Utf8(_) => "not UTF-8".into(),
        ErrorKind::InvalidToken => "not three base64url parts".into(),
        other => format!("refused ({other:?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(sub: Option<&str>, role: Option<&str>, tenant: Option<&str>) -> Claims {
        Claims {
            sub: sub.map(str::to_string),
            role: role.map(str::to_string),
            tenant: tenant.map(str::to_string),
        }
    }

    #[test]
    fn the_principal_of_the_claims() {
        let p = principal(claims(Some("alice"), Some("admin"), Some("acme")), None).expect("valid");
        assert_eq!(&*p.sub, "alice");
        assert_eq!(p.role, Ok(Role::Admin));
        assert_eq!(p.tenant.id(), "acme");
        let p = principal(claims(Some("bob"), None, None), None).expect("valid");
        assert_eq!(
            p.role,
            Err(NoRole::Missing),
            "no role claim: no rights by default"
        );
        assert!(p.tenant.is_default());
        let p = principal(claims(Some("bob"), None, None), Some(Role::ReadOnly)).expect("valid");
        assert_eq!(p.role, Ok(Role::ReadOnly), "JWT_DEFAULT_ROLE=read-only");
        let p = principal(
            claims(Some("bob"), Some("admin"), None),
            Some(Role::ReadOnly),
        );
        assert_eq!(p.expect("valid").role, Ok(Role::Admin), "a claim wins");
        let e = principal(claims(Some("t"), None, Some("a\u{1}b")), None).expect_err("bad tenant");
        assert!(e.to_string().contains("tenant"), "{e}");
        let p = principal(claims(Some("eve"), Some("root"), None), Some(Role::Admin));
        assert_eq!(p.expect("valid").role, Err(NoRole::Unknown("root".into())));
        let e = principal(claims(Some(""), Some("admin"), None), None).expect_err("empty sub");
        assert!(e.to_string().contains("sub"), "{e}");
    }
}
