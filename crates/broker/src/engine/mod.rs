//! The request logic between HTTP and PostgreSQL: push, pop, ack, lease, transaction, DLQ.

pub mod groups;
pub mod messages;
pub mod resources;
