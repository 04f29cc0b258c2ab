#!/usr/bin/env bash
# Runs the whole test suite: the Rust workspace (unit tests, and integration tests against a
# private PostgreSQL cluster the harness starts itself), then the compatibility suite that
# drives our broker with the official Python client, then the dashboard's browser tests
# (headless Chromium). scripts/setup.sh first makes sure the machine has what these need
# (installing it, or stopping with the command to run); formatting and lints come next: they
# are the cheapest way to fail.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
compat/run.sh
crates/broker/dashboard/tests/run.sh
