//! The request logic between HTTP and PostgreSQL: push, pop, ack, lease, transaction, DLQ.

pub mod groups;
pub mod messages;
pub mod push;
pub mod push_flush;
pub mod queues;
pub mod resources;
pub mod segment_build;
