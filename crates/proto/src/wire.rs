//! Small constants shared by the broker, the client SDK and the codecs of this crate.

/// The consumer group of plain queue consumption (no `consumerGroup`, or an empty one).
pub const QUEUE_MODE: &str = "__QUEUE_MODE__";

/// The longest queue name, partition name, transactionId, consumer group or lease id, in
/// UTF-8 bytes: every such string travels behind a `u16` length on the binary paths.
pub const MAX_NAME_BYTES: usize = 65535;

/// Content-Type of the binary push (`QPB1`) and binary transaction (`QTB1`) bodies.
pub const PUSH_CONTENT_TYPE: &str = "application/x-queen-push";

/// Preferred Content-Type of the framed pop answer (`QPF1`).
pub const POP_FRAMES_CONTENT_TYPE: &str = "application/x-queen-pop";

/// Bytes of rows the key-value `getMany` and `getPrefix` operations of one call may answer
/// together (each answers its first row whatever its size); past it they answer `truncated`.
/// A transaction's `kv` rider gets the same budget.
pub const KV_READ_BUDGET_BYTES: i64 = 4 * 1024 * 1024;
