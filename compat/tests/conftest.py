"""Fixtures of the compatibility suite. The wire mode comes from QUEEN_COMPAT_MODE
(json | binary), the broker from QUEEN_SERVER_URL; compat/run.sh sets both."""

import httpx
import pytest

from support import MODE, SERVER_URL, RecordingTransport, make_client


def pytest_report_header(config):
    return f"queen compat: mode={MODE} server={SERVER_URL}"


@pytest.fixture
def transport():
    return RecordingTransport()


@pytest.fixture
async def client(transport):
    q = make_client(transport)
    yield q
    await q.close()


@pytest.fixture
async def http():
    """Raw HTTP, for what the client has no API for."""
    async with httpx.AsyncClient(base_url=SERVER_URL, timeout=60) as h:
        yield h
