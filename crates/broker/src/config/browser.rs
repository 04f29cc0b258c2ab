//! The settings of the browser guard (docs/wire.md §1.4, `http/browser.rs`): which other web
//! origins may send requests to the broker, and which host names it answers to with auth off.
//! Flattened into [`super::Config`].

use clap::Args;

/// Cross-site requests and DNS rebinding (README "Browsers").
#[derive(Args, Debug, Clone, Default)]
pub struct BrowserConfig {
    /// Web origins (`scheme://host[:port]`, comma-separated) whose pages may send requests to
    /// the broker; `*` allows every origin. A browser request from any other origin than the
    /// broker's own is refused with 403.
    #[arg(
        long = "allowed-origins",
        env = "QUEEN_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,
    /// Host names (comma-separated; `.example.com` for every name under it, `*` for any) the
    /// broker answers to with auth off, besides IP addresses, `localhost`, names without a
    /// dot and `HOST`: a request naming another host is refused with 403 (DNS rebinding).
    #[arg(
        long = "allowed-hosts",
        env = "QUEEN_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
}

impl BrowserConfig {
    /// The allowed origins as browsers write them (lower case, no trailing slash), blanks
    /// dropped; an entry that is no origin is refused at boot by [`BrowserConfig::check`].
    pub fn origins(&self) -> Vec<String> {
        self.allowed_origins
            .iter()
            .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
            .filter(|o| !o.is_empty())
            .collect()
    }

    /// The allowed host names, lower case, blanks dropped.
    pub fn hosts(&self) -> Vec<String> {
        self.allowed_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect()
    }

    /// Refuses entries that could never match: an origin without a scheme or with a path, a
    /// host name with a scheme, a port or a path.
    pub fn check(&self) -> Result<(), String> {
        for origin in self.origins() {
            if origin == "*" {
                continue;
            }
            let authority = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            if authority.is_none_or(|a| a.is_empty() || a.contains(['/', '?', '#', '@'])) {
                return Err(format!(
                    "QUEEN_ALLOWED_ORIGINS entry {origin:?} is not an origin \
                     (scheme://host[:port], e.g. http://localhost:3000)"
                ));
            }
        }
        for host in self.hosts() {
            if host != "*" && (host.contains([':', '/', '@']) || host.trim_matches('.').is_empty())
            {
                return Err(format!(
                    "QUEEN_ALLOWED_HOSTS entry {host:?} is not a host name (no scheme, port or path)"
                ));
            }
        }
        Ok(())
    }

    /// The boot-log part.
    pub fn describe(&self) -> String {
        format!(
            "allowed_origins=[{}] allowed_hosts=[{}]",
            self.origins().join(","),
            self.hosts().join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(origins: &[&str], hosts: &[&str]) -> BrowserConfig {
        BrowserConfig {
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            allowed_hosts: hosts.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn entries_are_normalised_and_checked() {
        let c = cfg(
            &[" HTTP://App.Example:3000/ ", "", "*"],
            &["Queen.Internal", ".svc"],
        );
        assert_eq!(c.origins(), ["http://app.example:3000", "*"]);
        assert_eq!(c.hosts(), ["queen.internal", ".svc"]);
        assert_eq!(c.check(), Ok(()));
        for bad in ["app.example", "http://", "ftp://x", "http://x/path"] {
            let e = cfg(&[bad], &[]).check().expect_err(bad);
            assert!(e.contains("QUEEN_ALLOWED_ORIGINS"), "{e}");
        }
        for bad in ["http://x", "x:80", "."] {
            let e = cfg(&[], &[bad]).check().expect_err(bad);
            assert!(e.contains("QUEEN_ALLOWED_HOSTS"), "{e}");
        }
    }
}
