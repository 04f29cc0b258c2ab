//! Tests of running the broker: JWT authentication and roles, queue configuration and the table of queue options,
//! consumer-group and resource administration, refusal of unstorable input on every route,
//! slow clients and connection slots, migrations at boot, the retention loop, the `queen` command line (queues, and the key-value, lock and timer commands), the layering of the source tree, the length of the SQL functions, the maps of the docs and their section citations, and the lifecycle of the
//! `queen` binary through crashes. One PostgreSQL cluster serves the whole binary, each test
//! on its own database (see `queen_test_harness`); the crash tests start `queen` with an
//! embedded cluster of its own, the one they kill.

use queen_test_harness as common;

mod auth;
mod browser;
mod callbacks;
mod cli;
mod cli_extras;
mod cli_reads;
mod configure;
mod connection_slots;
mod docs_cites;
mod docs_map;
mod docs_sections;
mod edge_input;
mod framework_rejections;
mod groups;
mod layering;
mod lifecycle;
mod logs;
mod migrations;
mod prometheus;
mod queue_options;
mod read_bounds;
mod resources;
mod retention;
mod server_switch;
mod slow_clients;
mod sql_function_length;
mod sql_signatures;
mod sqlstates;
mod tenancy;
