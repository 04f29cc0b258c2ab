//! Ack-path tests: acks, leases, retries and the DLQ, and transactions (JSON and binary) that
//! push and ack together. One PostgreSQL cluster serves the whole binary; each test gets its
//! own database (see `queen_test_harness`).

use queen_test_harness as common;
use queen_test_harness::wire;

mod concurrency;
mod cost;
mod differential;
mod dlq;
mod dlq_ops;
mod fusion;
mod honesty;
mod lease;
mod options;
mod positional;
mod purged;
mod registry;
mod routes;
mod spec;
mod support;
mod transaction;
mod transaction_binary;
