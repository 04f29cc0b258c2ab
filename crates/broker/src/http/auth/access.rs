//! Who may call which route: the one route → role table of the broker (README "Roles"). The
//! authentication middleware looks every request up here by method and route template; a
//! route missing from the table needs `admin` (fail closed).

use std::fmt;

use crate::config::MetricsAccess;

/// The roles a token's `role` claim can grant, weakest first: each one includes the ones
/// before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Listings, depth, dead letters, message detail, status.
    ReadOnly,
    /// Plus producing and consuming: push, pop, ack, lease extension, transactions, traces.
    ReadWrite,
    /// Plus configuring and destroying: configure, queue and group deletion, seeks,
    /// subscriptions, dead-letter replay/purge/delete, maintenance.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::ReadOnly, Role::ReadWrite, Role::Admin];

    /// The claim value of the role.
    pub fn name(self) -> &'static str {
        match self {
            Role::ReadOnly => "read-only",
            Role::ReadWrite => "read-write",
            Role::Admin => "admin",
        }
    }

    /// The role a `role` claim names; `None` for a value that is no role.
    pub fn parse(claim: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == claim)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a route asks of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No token at all, even with auth on.
    Public,
    /// A valid token whose role is at least this one.
    Needs(Role),
}

/// One row of the table: a method and an axum route template.
#[derive(Debug, Clone, Copy)]
pub struct RouteAccess {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
}

const fn row(method: &'static str, path: &'static str, access: Access) -> RouteAccess {
    RouteAccess {
        method,
        path,
        access,
    }
}

const PUBLIC: Access = Access::Public;
const READ: Access = Access::Needs(Role::ReadOnly);
const WRITE: Access = Access::Needs(Role::ReadWrite);
const ADMIN: Access = Access::Needs(Role::Admin);

/// Every route of the broker and what it needs. `HEAD` is looked up as `GET`.
pub const ROUTES: &[RouteAccess] = &[
    // Liveness and counters, for probes and scrapers that hold no token (the two metrics
    // routes: unless QUEEN_METRICS_ACCESS names a role, METRICS_ROUTES).
    row("GET", "/health", PUBLIC),
    row("GET", "/metrics", PUBLIC),
    row("GET", "/metrics/prometheus", PUBLIC),
    // The dashboard's static files; the API calls it makes are not public.
    row("GET", "/", PUBLIC),
    row("GET", "/dashboard/", PUBLIC),
    row("GET", "/dashboard/app.js", PUBLIC),
    row("GET", "/dashboard/style.css", PUBLIC),
    // Reading.
    row("GET", "/status", READ),
    row("GET", "/api/v1/status", READ),
    row("GET", "/api/v1/resources/queues", READ),
    row("GET", "/api/v1/resources/queues/{queue}", READ),
    row("GET", "/api/v1/resources/queues/{queue}/depth", READ),
    row("GET", "/api/v1/resources/overview", READ),
    row("GET", "/api/v1/dlq", READ),
    row(
        "GET",
        "/api/v1/messages/{partition_id}/{transaction_id}",
        READ,
    ),
    row("GET", "/api/v1/consumer-groups", READ),
    row("GET", "/api/v1/consumer-groups/lagging", READ),
    row("GET", "/api/v1/consumer-groups/{group}", READ),
    row("GET", "/api/v1/system/maintenance", READ),
    row("GET", "/api/v1/system/maintenance/pop", READ),
    // Producing and consuming.
    row("POST", "/api/v1/push", WRITE),
    row("GET", "/api/v1/pop", WRITE),
    row("GET", "/api/v1/pop/queue/{queue}", WRITE),
    row(
        "GET",
        "/api/v1/pop/queue/{queue}/partition/{partition}",
        WRITE,
    ),
    row("POST", "/api/v1/ack", WRITE),
    row("POST", "/api/v1/ack/batch", WRITE),
    row("POST", "/api/v1/lease/{lease_id}/extend", WRITE),
    row("POST", "/api/v1/transaction", WRITE),
    row("POST", "/api/v1/kv", WRITE),
    row("POST", "/api/v1/locks", WRITE),
    row("POST", "/api/v1/traces", WRITE),
    // The streams runtime: registering, reading state, committing cycles.
    row("POST", "/streams/v1/queries", WRITE),
    row("POST", "/streams/v1/state/get", WRITE),
    row("POST", "/streams/v1/cycle", WRITE),
    row("POST", "/api/v1/timers", WRITE),
    row("GET", "/api/v1/timers/{queue}", READ),
    row("POST", "/api/v1/fetch", READ),
    row("POST", "/api/v1/partitions/changed", READ),
    row("GET", "/api/v1/timers/{queue}/{*key}", READ),
    row("DELETE", "/api/v1/timers/{queue}/{*key}", WRITE),
    // Ephemeral queues: producing and consuming; their gauges are reads, and declaring,
    // emptying and deleting one configure it.
    row("POST", "/api/v1/ephemeral/push", WRITE),
    row("GET", "/api/v1/ephemeral/pop", WRITE),
    row("POST", "/api/v1/ephemeral/ack", WRITE),
    row("GET", "/api/v1/ephemeral/queues", READ),
    row("GET", "/api/v1/ephemeral/queues/{queue}/depth", READ),
    row("POST", "/api/v1/ephemeral/configure", ADMIN),
    row("POST", "/api/v1/ephemeral/reset", ADMIN),
    row("DELETE", "/api/v1/ephemeral/queue/{queue}", ADMIN),
    // Configuring, destroying, moving cursors, maintenance.
    row("POST", "/api/v1/configure", ADMIN),
    row("DELETE", "/api/v1/resources/queues/{queue}", ADMIN),
    row("POST", "/api/v1/stats/refresh", ADMIN),
    row("DELETE", "/api/v1/dlq", ADMIN),
    row("POST", "/api/v1/system/maintenance", ADMIN),
    row("POST", "/api/v1/system/maintenance/pop", ADMIN),
    row(
        "DELETE",
        "/api/v1/messages/{partition_id}/{transaction_id}",
        ADMIN,
    ),
    row(
        "POST",
        "/api/v1/messages/{partition_id}/{transaction_id}/retry",
        ADMIN,
    ),
    row("DELETE", "/api/v1/consumer-groups/{group}", ADMIN),
    row(
        "POST",
        "/api/v1/consumer-groups/{group}/subscription",
        ADMIN,
    ),
    row(
        "DELETE",
        "/api/v1/consumer-groups/{group}/queues/{queue}",
        ADMIN,
    ),
    row(
        "POST",
        "/api/v1/consumer-groups/{group}/queues/{queue}/seek",
        ADMIN,
    ),
    row(
        "POST",
        "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
        ADMIN,
    ),
];

/// The routes whose access is `QUEEN_METRICS_ACCESS` instead of their row above.
pub const METRICS_ROUTES: [&str; 2] = ["/metrics", "/metrics/prometheus"];

/// What the metrics routes ask of a caller under the `QUEEN_METRICS_ACCESS` setting.
pub fn metrics(setting: MetricsAccess) -> Access {
    match setting {
        MetricsAccess::Public => PUBLIC,
        MetricsAccess::ReadOnly => READ,
        MetricsAccess::ReadWrite => WRITE,
        MetricsAccess::Admin => ADMIN,
    }
}

/// What the route `template` asks of a `method` call. `None` when the table knows the path
/// but not the method: the router answers 405 without running a handler, so there is
/// nothing to guard. A path the table does not know at all needs `admin`.
pub fn required(method: &str, template: &str) -> Option<Access> {
    let method = if method == "HEAD" { "GET" } else { method };
    let mut known_path = false;
    for r in ROUTES.iter().filter(|r| r.path == template) {
        if r.method == method {
            return Some(r.access);
        }
        known_path = true;
    }
    (!known_path).then_some(ADMIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(required("GET", "/health"), Some(Access::Public));
        assert_eq!(required("HEAD", "/api/v1/dlq"), Some(READ));
        assert_eq!(required("DELETE", "/api/v1/dlq"), Some(ADMIN));
        assert_eq!(required("POST", "/api/v1/push"), Some(WRITE));
        assert_eq!(required("PUT", "/api/v1/push"), None, "405 is the router's");
        assert_eq!(required("GET", "/api/v1/new-thing"), Some(ADMIN));
    }

    #[test]
    fn roles_order_and_names() {
        assert!(Role::ReadOnly < Role::ReadWrite && Role::ReadWrite < Role::Admin);
        for r in Role::ALL {
            assert_eq!(Role::parse(r.name()), Some(r));
        }
        assert_eq!(Role::parse("Admin"), None);
    }

    #[test]
    fn no_route_twice() {
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!(
                    a.method != b.method || a.path != b.path,
                    "{} {} listed twice",
                    a.method,
                    a.path
                );
            }
        }
    }
}
