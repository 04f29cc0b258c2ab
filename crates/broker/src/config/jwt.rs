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

/// The rights of a token without a `role` claim (`JWT_DEFAULT_ROLE`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultRole {
    /// None: every route that needs a role answers 403.
    #[value(name = "none")]
    None,
    #[value(name = "read-only")]
    ReadOnly,
    #[value(name = "read-write")]
    ReadWrite,
    #[value(name = "admin")]
    Admin,
}

impl DefaultRole {
    pub fn name(self) -> &'static str {
        match self {
            DefaultRole::None => "none",
            DefaultRole::ReadOnly => "read-only",
            DefaultRole::ReadWrite => "read-write",
            DefaultRole::Admin => "admin",
        }
    }
}

/// One `JWT_SKIP_PATHS` entry: a path (or, ending in `/`, every path under it) served without
/// a token to `method`, or to `GET` and `HEAD` when the entry names no method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipPath {
    /// Upper case; `None`: `GET` and `HEAD`.
    pub method: Option<String>,
    pub path: String,
}

impl SkipPath {
    /// `/path` or `METHOD /path`.
    fn parse(entry: &str) -> Result<SkipPath, String> {
        let (method, path) = match entry.split_once(char::is_whitespace) {
            Some((method, path)) => (Some(method), path.trim()),
            None => (None, entry),
        };
        if !path.starts_with('/') || path.contains(char::is_whitespace) {
            return Err(format!(
                "JWT_SKIP_PATHS entry {entry:?} is neither a path (/…) nor METHOD /path"
            ));
        }
        let method = method
            .map(|m| {
                let upper = m.to_ascii_uppercase();
                const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];
                METHODS
                    .contains(&upper.as_str())
                    .then_some(upper)
                    .ok_or_else(|| {
                        format!(
                            "JWT_SKIP_PATHS entry {entry:?}: {m:?} is not a method (one of {})",
                            METHODS.join(", ")
                        )
                    })
            })
            .transpose()?;
        Ok(SkipPath {
            method,
            path: path.to_string(),
        })
    }

    /// Whether a `method` request to `path` is served without a token.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        let method_ok = match &self.method {
            Some(m) => m == method,
            None => method == "GET" || method == "HEAD",
        };
        method_ok
            && (path == self.path || (self.path.ends_with('/') && path.starts_with(&self.path)))
    }
}

impl std::fmt::Display for SkipPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.method {
            Some(m) => write!(f, "{m} {}", self.path),
            None => write!(f, "GET|HEAD {}", self.path),
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
    /// Accept an `http://` JWT_JWKS_URL (keys fetched without TLS can be replaced on the way);
    /// off, only `https://` is accepted.
    #[arg(long = "jwt-jwks-allow-http", env = "JWT_JWKS_ALLOW_HTTP", default_value = "false", value_parser = parse_bool)]
    pub jwks_allow_http: bool,
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
    /// Refuse to start without JWT_AUDIENCE. Unset: required when the keys are public ones
    /// (JWT_PUBLIC_KEY, JWT_JWKS_URL) of an identity provider that also issues tokens for
    /// other applications; not with only JWT_SECRET.
    #[arg(long = "jwt-require-audience", env = "JWT_REQUIRE_AUDIENCE", value_parser = parse_bool)]
    pub require_audience: Option<bool>,
    /// The role of a token without a `role` claim: none (every route that needs a role
    /// answers 403), read-only, read-write or admin.
    #[arg(
        long = "jwt-default-role",
        env = "JWT_DEFAULT_ROLE",
        value_enum,
        default_value = "none"
    )]
    pub default_role: DefaultRole,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    #[arg(long = "jwt-clock-skew", env = "JWT_CLOCK_SKEW", default_value_t = 30)]
    pub clock_skew_s: u64,
    /// Extra paths served without a token, comma-separated: `/path` skips GET and HEAD only,
    /// `METHOD /path` that method; a path ending with `/` covers every path under it.
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
    fn skip_entries(&self) -> impl Iterator<Item = &str> {
        self.skip_paths
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
    }

    /// The parsed `JWT_SKIP_PATHS`; the message names an entry that is neither form.
    pub fn skip_rules(&self) -> Result<Vec<SkipPath>, String> {
        self.skip_entries().map(SkipPath::parse).collect()
    }

    /// Whether tokens must name JWT_AUDIENCE: as set, else when public keys are configured.
    pub fn audience_required(&self) -> bool {
        self.require_audience
            .unwrap_or(self.public_key.is_some() || self.jwks_url.is_some())
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
        if self.audience_required() && self.audience.is_none() {
            return Err(
                "JWT_AUDIENCE is not set, and the keys are public ones (JWT_PUBLIC_KEY or \
                 JWT_JWKS_URL): every token of that identity provider, also those issued for \
                 other applications, would be accepted. Set JWT_AUDIENCE to this broker's \
                 audience, or JWT_REQUIRE_AUDIENCE=false to accept them all"
                    .into(),
            );
        }
        if let Some(url) = &self.jwks_url {
            let http = url
                .get(..7)
                .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
            if http && !self.jwks_allow_http {
                return Err(format!(
                    "JWT_JWKS_URL {} is http://: keys fetched without TLS can be replaced on \
                     the way. Use https://, or set JWT_JWKS_ALLOW_HTTP=true",
                    mask_dsn(url)
                ));
            }
        }
        self.skip_rules().map(|_| ())
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
             jwks_timeout_ms={} jwks_min_refetch_ms={} jwks_allow_http={} issuer={} audience={} \
             require_audience={} default_role={} clock_skew_s={} skip_paths=[{}]",
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
            self.jwks_allow_http,
            self.issuer.as_deref().unwrap_or("unset"),
            self.audience.as_deref().unwrap_or("unset"),
            self.audience_required(),
            self.default_role.name(),
            self.clock_skew_s,
            self.skip_entries().collect::<Vec<_>>().join(","),
        )
    }
}
