#!/usr/bin/env bash
# Browser tests of the dashboard: builds the broker, starts it on a fresh embedded PostgreSQL
# and a free port, prepares a virtualenv with Selenium, and drives the machine's Chromium
# (Debian packages chromium and chromium-driver; .ci/run installs them). Screenshots land in
# target/dashboard-screenshots/.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../../.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
VENV="$ROOT/target/dashboard-venv"
DATA="$(mktemp -d /tmp/queen-dashboard-XXXXXX)"
chmod 755 "$DATA"   # the embedded PostgreSQL runs as the postgres user when we are root
LOG="$DATA.log"

(cd "$ROOT" && cargo build --locked --bin queen)
if [[ ! -x "$VENV/bin/pytest" ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$HERE/requirements.txt"
fi
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
QUEEN_DATA_DIR="$DATA" HOST=127.0.0.1 PORT="$PORT" LOG_LEVEL=warn "$TARGET/debug/queen" serve >"$LOG" 2>&1 &
BROKER=$!
cleanup() { kill "$BROKER" 2>/dev/null; wait "$BROKER" 2>/dev/null; rm -rf "$DATA" "$LOG"; }
trap cleanup EXIT
for _ in $(seq 1 180); do
  python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" \
    2>/dev/null && break
  kill -0 "$BROKER" 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 1
done
export QUEEN_URL="http://127.0.0.1:$PORT" DASHBOARD_SHOTS="$ROOT/target/dashboard-screenshots"
cd "$HERE" && "$VENV/bin/pytest" -q -p no:cacheprovider --timeout 120 .
