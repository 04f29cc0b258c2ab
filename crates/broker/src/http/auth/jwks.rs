//! The JWKS document of `JWT_JWKS_URL`: fetched on first use, kept for
//! `JWT_JWKS_REFRESH_INTERVAL`, and fetched again early when a token names a `kid` the cached
//! document lacks (a key rotation) — but never more often than once per
//! `JWT_JWKS_MIN_REFETCH_MS`, so tokens with made-up kids cannot turn the broker into a
//! load generator against the identity provider. A failed fetch keeps the keys it had.
//!
//! Requests whose key is cached never wait for a fetch: the keys are swapped in whole once a
//! fetch is done. Only the requests that need a fetch queue up behind the one in flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::sync::{Mutex, RwLock};

use crate::config::JwtConfig;
use crate::log_limit::{LogLimit, DEFAULT_WINDOW};

static FETCH_FAILURES: LogLimit = LogLimit::new(DEFAULT_WINDOW);

/// A verification key and the one algorithm it may verify.
pub struct Key {
    pub alg: Algorithm,
    pub key: DecodingKey,
}

/// The usable keys of one fetched document.
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<Key>>,
    /// Keys without a `kid`, for tokens that name none.
    unnamed: Vec<Arc<Key>>,
    fetched_at: Option<Instant>,
}

pub struct Jwks {
    url: String,
    http: reqwest::Client,
    max_age: Duration,
    min_refetch: Duration,
    keys: RwLock<Arc<KeySet>>,
    /// Held while a fetch is in flight; remembers when the last one started.
    fetching: Mutex<Option<Instant>>,
}

impl Jwks {
    pub fn new(cfg: &JwtConfig, url: &str) -> Result<Self, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("JWT_JWKS_URL {url:?}: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("JWT_JWKS_URL {url:?} must be an http or https URL"));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(cfg.jwks_timeout_ms))
            .build()
            .map_err(|e| format!("JWKS client: {e}"))?;
        Ok(Jwks {
            url: url.to_string(),
            http,
            max_age: Duration::from_secs(cfg.jwks_refresh_interval_s),
            min_refetch: Duration::from_millis(cfg.jwks_min_refetch_ms),
            keys: RwLock::new(Arc::default()),
            fetching: Mutex::new(None),
        })
    }

    /// The key a token with `kid` (and header algorithm `alg`) is to be verified with.
    pub async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<Arc<Key>, String> {
        let cached = self.keys.read().await.clone();
        if fresh(&cached, self.max_age) {
            if let Some(key) = pick(&cached, kid, alg) {
                return Ok(key);
            }
        }
        let keys = self.refresh(&cached).await;
        pick(&keys, kid, alg).ok_or_else(|| match kid {
            Some(kid) => format!("no key with kid {kid:?} in the JWKS document"),
            None => {
                "the token names no kid and the JWKS document has no single key for it".to_string()
            }
        })
    }

    /// Fetches the document again unless another request just did, or the last fetch
    /// started less than the minimum interval ago; answers the keys to use either way.
    async fn refresh(&self, seen: &Arc<KeySet>) -> Arc<KeySet> {
        let mut last = self.fetching.lock().await;
        let current = self.keys.read().await.clone();
        if !Arc::ptr_eq(&current, seen) {
            return current; // someone fetched while this request waited
        }
        if last.is_some_and(|at| at.elapsed() < self.min_refetch) {
            return current;
        }
        *last = Some(Instant::now());
        match self.fetch().await {
            Ok(fetched) => {
                let fetched = Arc::new(fetched);
                *self.keys.write().await = fetched.clone();
                fetched
            }
            Err(e) => {
                let text = format!("JWKS fetch from {} failed: {e}", self.url);
                if let Some(suppressed) = FETCH_FAILURES.admit(&text) {
                    tracing::warn!(suppressed, "{text}; keeping the keys fetched before");
                }
                current
            }
        }
    }

    async fn fetch(&self) -> Result<KeySet, String> {
        let response = self
            .http
            .get(&self.url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let doc: JwkSet = response
            .json()
            .await
            .map_err(|e| format!("not a JWKS document: {e}"))?;
        let mut set = KeySet {
            fetched_at: Some(Instant::now()),
            ..KeySet::default()
        };
        for jwk in &doc.keys {
            let Some(key) = usable(jwk) else { continue };
            match &jwk.common.key_id {
                Some(kid) => {
                    set.by_kid.insert(kid.clone(), Arc::new(key));
                }
                None => set.unnamed.push(Arc::new(key)),
            }
        }
        Ok(set)
    }
}

fn fresh(set: &KeySet, max_age: Duration) -> bool {
    set.fetched_at.is_some_and(|at| at.elapsed() < max_age)
}

/// The key for a token: by `kid`, else the only key of the document for the algorithm.
fn pick(set: &KeySet, kid: Option<&str>, alg: Algorithm) -> Option<Arc<Key>> {
    let found = match kid {
        Some(kid) => set.by_kid.get(kid).cloned(),
        None => {
            let mut fitting = set
                .by_kid
                .values()
                .chain(&set.unnamed)
                .filter(|k| k.alg == alg);
            match (fitting.next(), fitting.next()) {
                (Some(only), None) => Some(only.clone()),
                _ => None,
            }
        }
    };
    found.filter(|k| k.alg == alg)
}

/// A signature key of the document as RS256 or ES256 (P-256); other keys (encryption keys,
/// other algorithms and curves, symmetric keys) are skipped.
fn usable(jwk: &Jwk) -> Option<Key> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let alg = match (&jwk.algorithm, jwk.common.key_algorithm) {
        (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
        (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES256))
            if ec.curve == EllipticCurve::P256 =>
        {
            Algorithm::ES256
        }
        _ => return None,
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key { alg, key })
}
