//! What a pop asks for (docs/wire.md §7.2), as the HTTP floor parsed it: the shape of the
//! partitions it may claim, the group's first-contact starting point, and the knobs of one
//! claim. Every step of the pop reads it; none changes it.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::engine::tenant::{self, Tenant};
use crate::error::Result;

/// Which partitions a pop may claim from.
#[derive(Debug, Clone)]
pub enum PopShape {
    /// Any partition(s) of the queue.
    Wildcard { queue: String },
    /// One named partition.
    Targeted { queue: String, partition: String },
    /// Every queue whose labels match; an empty label matches any.
    Discovery { namespace: String, task: String },
}

impl PopShape {
    /// The shape with its client names stored the way `tenant` stores them (namespace and
    /// task too: a discovery pop only ever matches the caller's queues).
    pub fn of_tenant(self, tenant: &Tenant) -> Result<PopShape> {
        Ok(match self {
            PopShape::Wildcard { queue } => PopShape::Wildcard {
                queue: tenant::qualify(tenant, "queue", &queue)?,
            },
            PopShape::Targeted { queue, partition } => PopShape::Targeted {
                queue: tenant::qualify(tenant, "queue", &queue)?,
                partition,
            },
            PopShape::Discovery { namespace, task } => PopShape::Discovery {
                namespace: tenant::qualify(tenant, "namespace", &namespace)?,
                task: tenant::qualify(tenant, "task", &task)?,
            },
        })
    }

    /// The one queue (and partition, when targeted) the pop names; `None` for discovery.
    pub fn queue(&self) -> Option<(&str, Option<&str>)> {
        match self {
            PopShape::Wildcard { queue } => Some((queue, None)),
            PopShape::Targeted { queue, partition } => Some((queue, Some(partition))),
            PopShape::Discovery { .. } => None,
        }
    }
}

/// A named group's first-contact starting point.
#[derive(Debug, Clone, PartialEq)]
pub enum Subscription {
    /// Everything retained.
    All,
    /// Future messages only.
    New,
    /// From the first segment at or after this instant.
    From(DateTime<Utc>),
}

/// Which knobs of an `autopilot=true` pop the broker sizes (those the request left unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub batch: bool,
    pub partitions: bool,
}

/// A parsed pop request (docs/wire.md §7.2).
#[derive(Debug, Clone)]
pub struct PopRequest {
    pub shape: PopShape,
    pub batch: i32,
    pub partitions: i32,
    pub wait: bool,
    pub timeout: Duration,
    pub group: String,
    pub auto_ack: bool,
    pub subscription: Subscription,
    /// Per-request lease length; `None` = the queue's.
    pub lease_seconds: Option<i32>,
    /// `frames=true`: answer `QPF1` (docs/wire.md §7.7) instead of JSON.
    pub frames: bool,
    /// `autopilot=true`: the knobs the request left to the broker (the autopilot,
    /// `autopilot.rs`).
    pub autopilot: Option<Ask>,
}
