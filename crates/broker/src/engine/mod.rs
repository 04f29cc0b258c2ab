//! The request logic between HTTP and PostgreSQL: push, pop, ack, lease, transaction, DLQ.

pub mod ack;
pub mod dlq;
pub mod groups;
pub mod lease;
pub mod longpoll;
pub mod messages;
pub mod pop;
pub mod pop_state;
pub mod push;
pub mod push_binary;
pub mod push_commit;
pub mod push_dedup;
pub mod push_flush;
pub mod queues;
pub mod render;
pub mod render_framed;
pub mod resources;
pub mod segment_build;
pub mod transaction;
