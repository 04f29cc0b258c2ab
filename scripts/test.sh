#!/usr/bin/env bash
# Runs the whole test suite: the Rust workspace (unit tests, and integration tests against a
# private PostgreSQL cluster the harness starts itself), then the compatibility suite that
# drives our broker with the official Python client.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked
compat/run.sh
