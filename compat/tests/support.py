"""Helpers shared by the compatibility tests: unique names, a recording HTTP transport, the
client factory for the two wire modes, and small pop/consume utilities.

Everything here drives the official client `queen-mq`; raw HTTP (httpx) is only used by tests
that check something the client has no API for.
"""

import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

import httpx
from queen import Queen

SERVER_URL = os.environ.get("QUEEN_SERVER_URL", "http://localhost:6632")

# json: the client's defaults. binary: QPB1/QTB1 pushes with client-built compressed frames
# and QPF1 framed pops (docs/wire.md §6, §7.7, §10.4).
MODE = os.environ.get("QUEEN_COMPAT_MODE", "json")
MODES = ("json", "binary")
if MODE not in MODES:
    raise RuntimeError(f"QUEEN_COMPAT_MODE must be one of {MODES}, not {MODE!r}")

PUSH_BINARY_CONTENT_TYPE = "application/x-queen-push"
POP_FRAMED_CONTENT_TYPE = "application/x-queen-pop"


def unique(prefix: str) -> str:
    """A queue/group/namespace name no other test (or earlier run) uses."""
    return f"compat-{prefix}-{uuid.uuid4().hex[:12]}"


def iso_now() -> str:
    """Now as the official tests write a subscription timestamp (microseconds, `Z`)."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass
class Exchange:
    """One HTTP round trip as the client's transport saw it."""

    method: str
    path: str
    request_content_type: str
    request_head: bytes
    status: int
    response_headers: Dict[str, str]
    response_body: bytes


@dataclass
class RecordingTransport(httpx.AsyncBaseTransport):
    """Wraps the real transport and keeps every exchange, so a test can check which wire
    form the client actually used (the client silently falls back to JSON)."""

    inner: httpx.AsyncBaseTransport = field(
        default_factory=lambda: httpx.AsyncHTTPTransport(
            # The client's own pool limits (docs/wire.md §1.1); a custom transport replaces them.
            limits=httpx.Limits(max_keepalive_connections=10, max_connections=100)
        )
    )
    exchanges: List[Exchange] = field(default_factory=list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = b""
        response = await self.inner.handle_async_request(request)
        raw = await response.aread()
        await response.aclose()
        self.exchanges.append(
            Exchange(
                method=request.method,
                path=request.url.raw_path.decode("ascii"),
                request_content_type=request.headers.get("content-type", ""),
                request_head=body[:4],
                status=response.status_code,
                response_headers={k.lower(): v for k, v in response.headers.items()},
                response_body=raw,
            )
        )
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            content=raw,
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    def matching(self, method: str, path_prefix: str) -> List[Exchange]:
        return [e for e in self.exchanges if e.method == method and e.path.startswith(path_prefix)]


def make_client(transport: Optional[RecordingTransport] = None, mode: str = MODE,
                bearer_token: Optional[str] = None, url: str = SERVER_URL) -> Queen:
    """The official client in the requested wire mode (with a JWT when the broker needs one),
    of the pass's broker unless `url` names another (a broker the test owns)."""
    wire: Dict[str, Any] = {}
    if mode == "binary":
        wire = dict(binary_push=True, push_compression=True, framed_pop=True)
    return Queen(url, transport=transport or RecordingTransport(),
                 bearer_token=bearer_token, **wire)


async def pop_now(builder: Any) -> List[Dict[str, Any]]:
    """One non-waiting pop (docs/wire.md §5.2: a 201 push is visible to it at once)."""
    return await builder.wait(False).pop()


async def pop_all(client: Queen, queue: str, group: Optional[str] = None, batch: int = 100,
                  ack: bool = True) -> List[Dict[str, Any]]:
    """Drains a queue for a group with non-waiting pops, acking each batch."""
    out: List[Dict[str, Any]] = []
    while True:
        b = client.queue(queue).batch(batch).partitions(16)
        if group:
            b = b.group(group)
        msgs = await pop_now(b)
        if not msgs:
            return out
        out.extend(msgs)
        if ack:
            res = await client.ack(msgs, True, {"group": group} if group else None)
            assert res["success"], res


async def push_payloads(client: Queen, queue: str, payloads: List[Any], partition: str = "Default",
                        prefix: Optional[str] = None) -> List[Dict[str, Any]]:
    """Pushes payloads in one request (with deterministic transactionIds when prefix is set)
    and checks every item was queued."""
    items = []
    for i, p in enumerate(payloads):
        item: Dict[str, Any] = {"data": p}
        if prefix is not None:
            item["transactionId"] = f"{prefix}-{i}"
        items.append(item)
    res = await client.queue(queue).partition(partition).push(items)
    assert [r["status"] for r in res] == ["queued"] * len(payloads), res
    return res

