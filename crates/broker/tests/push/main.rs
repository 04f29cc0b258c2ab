//! Push tests: the JSON and binary push routes, their refusals and limits, the dedup cache,
//! and pushes under real faults. One PostgreSQL cluster serves the whole binary; each test
//! gets its own database (see `queen_test_harness`).

use queen_test_harness as common;
use queen_test_harness::wire;

mod bad_input;
mod binary;
mod binary_limits;
mod binary_load;
mod bodies;
mod body_budget;
mod dedup_cache;
mod dedup_metrics;
mod door;
mod encryption;
mod encryption_timers;
mod faults;
mod json;
mod pipeline;
mod spool;
mod vouched;
