//! Pop tests: the pop routes and what a claim means, long-polls and their wake-ups, bounds,
//! locks, visibility, racing consumers and the framed answer. One PostgreSQL cluster serves
//! the whole binary; each test gets its own database (see `queen_test_harness`).

use queen_test_harness as common;
use queen_test_harness::wire;

mod admission;
mod autopilot;
mod bounds;
mod buffers;
mod concurrency;
mod damaged;
mod differential;
mod framed;
mod hints;
mod hotlist;
mod locks;
mod longpoll;
mod race;
mod routes;
mod segment_cache;
mod semantics;
mod set_claim;
mod spec;
mod support;
mod visibility;
