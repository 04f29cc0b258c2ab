"""conftest.py for the official queen-mq 2.6.0 integration tests (docs/wire.md §17 step 4).

The sdist ships its tests without their conftest; compat/run.sh copies this file into the
unpacked sdist's tests/ before every run. One function-scoped `client` fixture, in the wire
mode QUEEN_COMPAT_MODE names: `json` (the client's defaults) or `binary` (binary push with
client-built compressed frames, binary transactions and framed pops)."""

import os

import pytest
from queen import Queen

URL = os.environ.get("QUEEN_SERVER_URL", "http://localhost:6632")
MODE = os.environ.get("QUEEN_COMPAT_MODE", "json")
WIRE = {
    "json": {},
    "binary": {"binary_push": True, "push_compression": True, "framed_pop": True},
}


def pytest_report_header(config):
    return f"queen compat (official tests): mode={MODE} server={URL}"


@pytest.fixture
async def client():
    if MODE not in WIRE:
        raise RuntimeError(f"QUEEN_COMPAT_MODE must be one of {sorted(WIRE)}, not {MODE!r}")
    q = Queen(URL, **WIRE[MODE])
    yield q
    await q.close()
