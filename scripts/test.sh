#!/usr/bin/env bash
# Runs the whole test suite: the Rust workspace (unit tests, and integration tests against a
# private PostgreSQL cluster the harness starts itself), then the compatibility suite that
# drives our broker with the official Python client. Formatting and lints come first: they
# are the cheapest way to fail.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
compat/run.sh
