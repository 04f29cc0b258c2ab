//! The caller's tenant on the engine floor (docs/engine.md §2.10, README "Tenants"). The http
//! floor hands every request's [`Tenant`] down; the engine qualifies the names a client sends
//! ([`qualify`]) before they reach a cache, a fusion lane or SQL, keeps only the caller's rows
//! of listings that span tenants ([`owns`]), and passes [`Tenant::id`] to the SQL functions
//! addressed by partition id or lease id, which check ownership themselves.

pub use queen_proto::tenant::{local, local_text, Tenant, SEPARATOR};

use crate::error::{Error, Result};

/// The stored form of a client's name (`field` names it in a refusal).
pub fn qualify(tenant: &Tenant, field: &'static str, name: &str) -> Result<String> {
    tenant
        .qualified(field, name)
        .map_err(|e| Error::bad(e.to_string()))
}

/// [`qualify`] in place.
pub fn qualify_in_place(tenant: &Tenant, field: &'static str, name: &mut String) -> Result<()> {
    if !tenant.is_default() {
        *name = qualify(tenant, field, name)?;
    }
    Ok(())
}

/// Whether the stored name `stored` (of a queue, namespace or task) belongs to `tenant`.
pub fn owns(tenant: &Tenant, stored: &str) -> bool {
    queen_proto::tenant::tenant_of(stored) == tenant.id()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_by_stored_name() {
        let acme = Tenant::parse(Some("acme")).unwrap();
        let default = Tenant::default();
        let stored = qualify(&acme, "queue", "orders").unwrap();
        assert!(owns(&acme, &stored));
        assert!(!owns(&default, &stored));
        assert!(owns(&default, "orders"));
        assert!(!owns(&acme, "orders"));
    }
}
