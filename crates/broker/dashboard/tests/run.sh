#!/usr/bin/env bash
# Browser tests of the dashboard: builds the broker, starts two of them on fresh embedded
# PostgreSQL clusters and free ports (one with auth off, one with HS256 JWT auth on), prepares
# a virtualenv with Selenium, and drives the machine's Chromium (Debian packages chromium and
# chromium-driver; scripts/setup.sh installs them). Screenshots land in target/dashboard-screenshots/.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../../.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
VENV="$ROOT/target/dashboard-venv"

(cd "$ROOT" && cargo build --locked --bin queen)
if [[ ! -x "$VENV/bin/pytest" ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$HERE/requirements.txt"
fi

BROKERS=()
DIRS=()
cleanup() {
  for pid in "${BROKERS[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  for dir in "${DIRS[@]}"; do rm -rf "$dir" "$dir.log"; done
}
trap cleanup EXIT

# start_broker VAR [ENV=VALUE…]: starts a broker with the given settings and sets VAR to its URL.
start_broker() {
  local var="$1"; shift
  local data port pid
  data="$(mktemp -d /tmp/queen-dashboard-XXXXXX)"
  chmod 755 "$data"   # the embedded PostgreSQL runs as the postgres user when we are root
  DIRS+=("$data")
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  env "$@" QUEEN_DATA_DIR="$data" HOST=127.0.0.1 PORT="$port" LOG_LEVEL=warn \
    "$TARGET/debug/queen" serve >"$data.log" 2>&1 &
  pid=$!
  BROKERS+=("$pid")
  for _ in $(seq 1 180); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" \
      2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$data.log"; exit 1; }
    sleep 1
  done
  printf -v "$var" 'http://127.0.0.1:%s' "$port"
}

QUEEN_AUTH_SECRET="dashboard-test-secret-$RANDOM$RANDOM"
start_broker QUEEN_URL
start_broker QUEEN_AUTH_URL JWT_ENABLED=true JWT_SECRET="$QUEEN_AUTH_SECRET"
export QUEEN_URL QUEEN_AUTH_URL QUEEN_AUTH_SECRET DASHBOARD_SHOTS="$ROOT/target/dashboard-screenshots"
cd "$HERE" && "$VENV/bin/pytest" -q -p no:cacheprovider --timeout 120 .
