//! The `JWT_*` part of the configuration (docs/wire.md §1.2): which keys verify a bearer
//! token and what a valid one must say. Flattened into [`super::Config`].

use clap::Args;

use super::{mask_dsn, parse_bool};

/// A signature algorithm `JWT_ALGORITHM` may name.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtAlgorithm {
    /// Every algorithm a configured key source can verify.
    #[value(name = "auto")]
    Auto,
    #[value(name = "HS256")]
    Hs256,
    #[value(name = "RS256")]
    Rs256,
    #[value(name = "ES256")]
    Es256,
}

impl JwtAlgorithm {
    pub fn name(self) -> &'static str {
        match self {
            JwtAlgorithm::Auto => "auto",
            JwtAlgorithm::Hs256 => "HS256",
            JwtAlgorithm::Rs256 => "RS256",
            JwtAlgorithm::Es256 => "ES256",
        }
    }
}

/// JWT authentication (docs/wire.md §1, README "Authentication"). Off by default; on, every
/// route but the public ones needs `Authorization: Bearer <jwt>`.
#[derive(Args, Debug, Clone)]
pub struct JwtConfig {
    /// Require a valid bearer token on every non-public route.
    #[arg(long = "jwt-enabled", env = "JWT_ENABLED", default_value = "false", value_parser = parse_bool)]
    pub enabled: bool,
    /// Accepted signature algorithms, comma-separated (HS256, RS256, ES256); `auto`: every
    /// algorithm a configured key source can verify.
    #[arg(
        long = "jwt-algorithm",
        env = "JWT_ALGORITHM",
        default_value = "auto",
        value_delimiter = ',',
        ignore_case = true
    )]
    pub algorithms: Vec<JwtAlgorithm>,
    /// HS256 shared secret (masked in the boot log).
    #[arg(long = "jwt-secret", env = "JWT_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// RS256 or ES256 public key: the PEM text itself, or the path of a PEM file.
    #[arg(
        long = "jwt-public-key",
        env = "JWT_PUBLIC_KEY",
        hide_env_values = true
    )]
    pub public_key: Option<String>,
    /// URL of a JWKS document (RS256/ES256 keys by `kid`), fetched on first use and cached.
    #[arg(long = "jwt-jwks-url", env = "JWT_JWKS_URL")]
    pub jwks_url: Option<String>,
    /// Seconds a fetched JWKS document is used before it is fetched again.
    #[arg(long = "jwt-jwks-refresh-interval", env = "JWT_JWKS_REFRESH_INTERVAL", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    pub jwks_refresh_interval_s: u64,
    /// Milliseconds one JWKS fetch may take.
    #[arg(long = "jwt-jwks-timeout-ms", env = "JWT_JWKS_TIMEOUT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub jwks_timeout_ms: u64,
    /// Least milliseconds between two JWKS fetches: a token naming an unknown `kid` refetches
    /// the document at most this often, so a flood of bad kids cannot hammer the JWKS server.
    #[arg(
        long = "jwt-jwks-min-refetch-ms",
        env = "JWT_JWKS_MIN_REFETCH_MS",
        default_value_t = 10_000
    )]
    pub jwks_min_refetch_ms: u64,
    /// Required `iss` claim (unset: not checked).
    #[arg(long = "jwt-issuer", env = "JWT_ISSUER")]
    pub issuer: Option<String>,
    /// Required `aud` claim, one of the token's audiences (unset: not checked).
    #[arg(long = "jwt-audience", env = "JWT_AUDIENCE")]
    pub audience: Option<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    #[arg(long = "jwt-clock-skew", env = "JWT_CLOCK_SKEW", default_value_t = 30)]
    pub clock_skew_s: u64,
    /// Extra paths served without a token, comma-separated: an exact path, or a prefix when
    /// the entry ends with `/`.
    #[arg(long = "jwt-skip-paths", env = "JWT_SKIP_PATHS", value_delimiter = ',')]
    pub skip_paths: Vec<String>,
}

impl JwtConfig {
    /// The algorithms accepted: those named, or with `auto` every one a key source serves.
    pub fn accepted(&self) -> Vec<JwtAlgorithm> {
        if self.algorithms.contains(&JwtAlgorithm::Auto) {
            let mut out = Vec::new();
            if self.secret.is_some() {
                out.push(JwtAlgorithm::Hs256);
            }
            if self.public_key.is_some() || self.jwks_url.is_some() {
                out.extend([JwtAlgorithm::Rs256, JwtAlgorithm::Es256]);
            }
            return out;
        }
        self.algorithms.clone()
    }

    /// The skip paths as configured, blanks dropped.
    pub fn skip_paths(&self) -> impl Iterator<Item = &str> {
        self.skip_paths
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
    }

    /// Refuses the combinations that cannot work, with the fix in the message: auth on without
    /// any key source, an algorithm without its key source, an empty secret, a skip path that
    /// is not a path.
    pub fn check(&self) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if self.secret.as_deref() == Some("") {
            return Err("JWT_SECRET is set but empty".into());
        }
        if self.secret.is_none() && self.public_key.is_none() && self.jwks_url.is_none() {
            return Err(
                "JWT_ENABLED=true needs a key: set JWT_SECRET (HS256), JWT_PUBLIC_KEY \
                        (RS256/ES256, PEM) or JWT_JWKS_URL (RS256/ES256)"
                    .into(),
            );
        }
        if self.algorithms.contains(&JwtAlgorithm::Auto) && self.algorithms.len() > 1 {
            return Err("JWT_ALGORITHM=auto cannot be combined with named algorithms".into());
        }
        for alg in self.accepted() {
            let served = match alg {
                JwtAlgorithm::Hs256 => self.secret.is_some(),
                _ => self.public_key.is_some() || self.jwks_url.is_some(),
            };
            if !served {
                let needs = match alg {
                    JwtAlgorithm::Hs256 => "JWT_SECRET",
                    _ => "JWT_PUBLIC_KEY or JWT_JWKS_URL",
                };
                return Err(format!(
                    "JWT_ALGORITHM names {} but {needs} is not set",
                    alg.name()
                ));
            }
        }
        if let Some(bad) = self.skip_paths().find(|p| !p.starts_with('/')) {
            return Err(format!(
                "JWT_SKIP_PATHS entry {bad:?} is not a path (must start with /)"
            ));
        }
        Ok(())
    }

    /// The boot-log line: which key sources are set, never the secret or key itself.
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "jwt=off".into();
        }
        let set = |v: &Option<String>| if v.is_some() { "set" } else { "unset" };
        let algorithms: Vec<&str> = self.accepted().iter().map(|a| a.name()).collect();
        format!(
            "jwt=on algorithms={} secret={} public_key={} jwks_url={} jwks_refresh_interval_s={} \
             jwks_timeout_ms={} jwks_min_refetch_ms={} issuer={} audience={} clock_skew_s={} \
             skip_paths=[{}]",
            algorithms.join(","),
            set(&self.secret),
            set(&self.public_key),
            self.jwks_url
                .as_deref()
                .map(mask_dsn)
                .unwrap_or_else(|| "unset".into()),
            self.jwks_refresh_interval_s,
            self.jwks_timeout_ms,
            self.jwks_min_refetch_ms,
            self.issuer.as_deref().unwrap_or("unset"),
            self.audience.as_deref().unwrap_or("unset"),
            self.clock_skew_s,
            self.skip_paths().collect::<Vec<_>>().join(","),
        )
    }
}
