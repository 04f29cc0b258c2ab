//! The tenant a caller acts for (docs/wire.md §1.3, docs/engine.md §2.10): one parser, and
//! the one rule that makes tenants unable to meet — every name a client chooses for a shared
//! object (queue, namespace, task) is stored **qualified** by its tenant.
//!
//! The default tenant (no `tenant` claim, or auth off) stores names as sent, so a database
//! written before tenants existed reads unchanged. Any other tenant `t` stores `name` as
//! `t` + [`SEPARATOR`] + `name`. The separator is a control character, which no client name
//! may hold (`crate::name`), so no name of one tenant can ever equal a name of another, and
//! everything keyed by a stored name (queue rows, push fusion lanes, wake gates, encryption
//! flags, dedup resets, spool records, pop caches) is keyed per tenant by construction.
//! [`local`] turns a stored name back into the name the tenant's client knows.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::name::{Name, NameError};
use crate::wire::MAX_NAME_BYTES;

/// Between a tenant and a name in a stored name: a control character (no client name holds one).
pub const SEPARATOR: char = '\u{1}';

/// The longest tenant a token may name, in UTF-8 bytes.
pub const MAX_TENANT_BYTES: usize = 256;

/// A tenant: the default one (`Tenant::default()`: callers without a `tenant` claim, and every
/// caller with auth off) or a `tenant` claim checked by the name rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Tenant(Option<Arc<str>>);

impl Tenant {
    /// A token's `tenant` claim: absent or empty is the default tenant; anything else must be
    /// a name without any whitespace (so a qualification is one word of a text, [`local_text`])
    /// of at most [`MAX_TENANT_BYTES`].
    pub fn parse(claim: Option<&str>) -> Result<Self, NameError> {
        let Some(text) = claim.filter(|t| !t.is_empty()) else {
            return Ok(Tenant(None));
        };
        let name = Name::parse("tenant", text)?;
        if name.contains(char::is_whitespace) {
            return Err(NameError::Whitespace { field: "tenant" });
        }
        if name.len() > MAX_TENANT_BYTES {
            return Err(NameError::TooLong {
                field: "tenant",
                len: name.len(),
            });
        }
        Ok(Tenant(Some(Arc::from(name.as_str()))))
    }

    pub fn is_default(&self) -> bool {
        self.0.is_none()
    }

    /// The tenant's id as stored in `queen.queues.tenant_id`: `""` for the default tenant.
    pub fn id(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }

    /// The stored form of a client's (already checked) name; `""` stays `""` (an unset
    /// namespace or task). Refused when the qualified name outgrows the name limit.
    pub fn qualify<'a>(
        &self,
        field: &'static str,
        name: &'a str,
    ) -> Result<Cow<'a, str>, NameError> {
        let Some(tenant) = &self.0 else {
            return Ok(Cow::Borrowed(name));
        };
        if name.is_empty() {
            return Ok(Cow::Borrowed(name));
        }
        let len = tenant.len() + SEPARATOR.len_utf8() + name.len();
        if len > MAX_NAME_BYTES {
            return Err(NameError::TooLong { field, len });
        }
        Ok(Cow::Owned(format!("{tenant}{SEPARATOR}{name}")))
    }

    /// [`Tenant::qualify`] into an owned string.
    pub fn qualified(&self, field: &'static str, name: &str) -> Result<String, NameError> {
        self.qualify(field, name).map(Cow::into_owned)
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_deref().unwrap_or("(default)"))
    }
}

/// The tenant id a stored name belongs to: what precedes the separator, `""` (the default
/// tenant) for a name stored as sent.
pub fn tenant_of(stored: &str) -> &str {
    stored
        .split_once(SEPARATOR)
        .map_or("", |(tenant, _)| tenant)
}

/// The name a tenant's client knows for a stored name: what follows the tenant.
pub fn local(stored: &str) -> &str {
    stored
        .split_once(SEPARATOR)
        .map_or(stored, |(_, name)| name)
}

/// A text (an error message) naming stored names, as a client reads it: every qualification
/// (a tenant, which holds no whitespace, and the separator) removed.
pub fn local_text(text: &str) -> Cow<'_, str> {
    if !text.contains(SEPARATOR) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for piece in text.split_inclusive(char::is_whitespace) {
        out.push_str(piece.rsplit_once(SEPARATOR).map_or(piece, |(_, rest)| rest));
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tenant_stores_names_as_sent() {
        for claim in [None, Some("")] {
            let t = Tenant::parse(claim).expect("default");
            assert!(t.is_default());
            assert_eq!(t.id(), "");
            assert_eq!(t.qualify("queue", "orders").unwrap(), "orders");
        }
    }

    #[test]
    fn other_tenants_qualify_and_local_undoes_it() {
        let a = Tenant::parse(Some("acme")).expect("tenant");
        let b = Tenant::parse(Some("bolt")).expect("tenant");
        let qa = a.qualified("queue", "orders").unwrap();
        let qb = b.qualified("queue", "orders").unwrap();
        assert_ne!(qa, qb);
        assert_ne!(qa, "orders");
        assert_eq!(local(&qa), "orders");
        assert_eq!(local("orders"), "orders");
        assert_eq!(a.qualify("namespace", "").unwrap(), "", "unset stays unset");
        assert_eq!(a.id(), "acme");
        let text = format!("queue {qa} is full; partition p of {qb}");
        assert_eq!(
            local_text(&text),
            "queue orders is full; partition p of orders"
        );
        assert_eq!(local_text("plain text"), "plain text");
    }

    #[test]
    fn bad_claims_are_refused() {
        assert!(Tenant::parse(Some("a\u{1}b")).is_err());
        assert!(Tenant::parse(Some(" a")).is_err());
        assert!(Tenant::parse(Some("a b")).is_err());
        assert!(Tenant::parse(Some(&"x".repeat(MAX_TENANT_BYTES + 1))).is_err());
        let t = Tenant::parse(Some("t")).unwrap();
        assert!(t.qualify("queue", &"q".repeat(MAX_NAME_BYTES)).is_err());
    }
}
