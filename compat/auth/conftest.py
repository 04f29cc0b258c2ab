"""Fixtures of the authentication passes (compat/run.sh auth-json, auth-binary): the broker
runs with JWT_ENABLED=true and the JWT_SECRET given to pytest too; tokens are signed here
with the official test's own minimal HS256 signer, so no JWT package is needed."""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
from pathlib import Path

import pytest

# The shared helpers of the compatibility suite (unique names, the recording transport, the
# client factory for both wire modes).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import MODE, SERVER_URL, RecordingTransport, make_client  # noqa: E402

JWT_SECRET = os.environ.get("JWT_SECRET", "")


def pytest_report_header(config):
    return f"queen compat (auth): mode={MODE} server={SERVER_URL}"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def make_token(sub: str, role: str) -> str:
    """An HS256 JWT for `sub` with `role`, valid for an hour."""
    if not JWT_SECRET:
        raise RuntimeError("the auth passes need JWT_SECRET (compat/run.sh sets it)")
    now = int(time.time())
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = _b64url(json.dumps({"sub": sub, "role": role, "iat": now, "exp": now + 3600}).encode())
    signing_input = f"{header}.{claims}".encode()
    signature = hmac.new(JWT_SECRET.encode(), signing_input, hashlib.sha256).digest()
    return f"{header}.{claims}.{_b64url(signature)}"


@pytest.fixture
def transport():
    return RecordingTransport()


@pytest.fixture
async def admin():
    """A client with an admin token (creates queues)."""
    q = make_client(bearer_token=make_token("compat-admin", "admin"))
    yield q
    await q.close()


@pytest.fixture
async def producer(transport):
    """A read-write client whose exchanges are recorded."""
    q = make_client(transport, bearer_token=make_token("compat-producer", "read-write"))
    yield q
    await q.close()
