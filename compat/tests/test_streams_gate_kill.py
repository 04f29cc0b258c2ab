"""Streams under a broker kill (docs/wire.md §24, issue 37): the official client's `Stream` runs
a token-bucket gate from one queue to another while its broker is killed with SIGKILL and
started again on the same data directory (same port). The kill lands right after the broker
committed a cycle whose answer the client then never gets; the SDK retries that cycle against
the restarted broker, which answers it from its cycle memory (`replayed`). Every source message
reaches the sink exactly once and in order, the source is fully acked, and the gate's persisted
per-partition state counts exactly the messages that passed it — the cycle (state, sink pushes,
source ack) commits atomically and once, whatever the kill cut.

The test owns its broker (`OwnBroker`): the pass's broker cannot be killed under the other
tests. It runs the binary compat/run.sh built (QUEEN_BROKER_BIN, else target/debug/queen)."""

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from queen.streams import Stream, token_bucket_gate

from support import make_client, pop_all, unique

ROOT = Path(__file__).resolve().parents[2]
BROKER_BIN = os.environ.get("QUEEN_BROKER_BIN") or str(ROOT / "target" / "debug" / "queen")
PARTITIONS = 8
PER_PARTITION = 250
TOTAL = PARTITIONS * PER_PARTITION
CAPACITY = 25
REFILL_PER_SEC = 25
BOOT_TIMEOUT = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class OwnBroker:
    """A `queen serve` with its own data directory (embedded PostgreSQL) and port, which the
    test may kill with SIGKILL and start again on the same directory and port."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="queen-compat-streamkill."))
        self.dir.chmod(0o755)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.boots = 0
        self.killed = []

    def _postmaster_pid(self):
        try:
            return int((self.dir / "pg" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    async def start(self):
        env = {k: v for k, v in os.environ.items()
               if k not in ("DATABASE_URL", "PG_HOST", "JWT_ENABLED", "JWT_SECRET",
                            "JWT_PUBLIC_KEY", "JWT_JWKS_URL", "QUEEN_SERVER_URL")}
        env.update(PORT=str(self.port), HOST="127.0.0.1", QUEEN_DATA_DIR=str(self.dir))
        self.boots += 1
        log = open(self.dir.parent / f"{self.dir.name}.boot{self.boots}.log", "wb")
        self.proc = subprocess.Popen([BROKER_BIN, "serve"], env=env, stdout=log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + BOOT_TIMEOUT
        async with httpx.AsyncClient(timeout=2) as h:
            while time.monotonic() < deadline:
                assert self.proc.poll() is None, f"broker exited during boot: {self.log_tail()}"
                try:
                    r = await h.get(f"{self.url}/health")
                    if r.status_code == 200 and r.json().get("status") == "healthy":
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        raise AssertionError(f"broker not healthy within {BOOT_TIMEOUT}s: {self.log_tail()}")

    async def kill9(self):
        """SIGKILL, then wait for the embedded PostgreSQL to follow (parent-death signal)."""
        pg = self._postmaster_pid()
        self.proc.send_signal(signal.SIGKILL)
        self.killed.append(self.proc.wait())
        deadline = time.monotonic() + 60
        while pg is not None and _alive(pg) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        for log in self.dir.parent.glob(f"{self.dir.name}.boot*.log"):
            log.unlink()

    def log_tail(self) -> str:
        logs = sorted(self.dir.parent.glob(f"{self.dir.name}.boot*.log"))
        return logs[-1].read_text(errors="replace")[-3000:] if logs else ""


class CutCycle:
    """Wraps the SDK's streams HTTP client (an httpx.AsyncClient): once `after` sink pushes
    were committed, the next cycle is sent, committed by the broker, and then the broker is
    killed and the answer dropped (a transport error), as if the kill had cut the response.
    Records the answer the SDK's retry then gets for that same cycle."""

    def __init__(self, inner, broker, after):
        self.inner, self.broker, self.after = inner, broker, after
        self.pushed = 0
        self.killed = asyncio.Event()
        self.cut_body = None
        self.retried_answer = None

    async def post(self, url, json=None, **kw):
        resp = await self.inner.post(url, json=json, **kw)
        if not url.endswith("/streams/v1/cycle") or resp.status_code != 200:
            return resp
        if self.cut_body is not None and json == self.cut_body and self.retried_answer is None:
            self.retried_answer = resp.json()
        elif not self.killed.is_set():
            self.pushed += len(json.get("push_items") or [])
            if self.pushed >= self.after:
                self.cut_body = json
                await self.broker.kill9()
                self.killed.set()
                raise httpx.ReadError("answer lost: the broker was killed")
        return resp

    async def aclose(self):
        await self.inner.aclose()


async def _fill(client, src):
    """One push per message, each partition in order a few milliseconds apart (the runner
    orders a batch by (createdAt, id); see test_streams._fill_source), partitions at once."""
    async def one_partition(p):
        for i in range(PER_PARTITION):
            res = await client.queue(src).partition(f"p{p}").push([{"data": {"id": f"{p}-{i}"}}])
            assert res[0]["status"] == "queued", res
            await asyncio.sleep(0.002)
    await asyncio.gather(*(one_partition(p) for p in range(PARTITIONS)))


async def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_token_bucket_gate_under_a_broker_kill_delivers_each_message_once():
    broker = OwnBroker()
    await broker.start()
    client = make_client(url=broker.url)
    runner = None
    try:
        src, sink = unique("kill-src"), unique("kill-sink")
        # A short source lease: a gate's denied tail, and any batch whose cycle the kill cut,
        # comes back soon.
        await client.queue(src).config({"lease_time": 1}).create()
        await client.queue(sink).create()
        await _fill(client, src)

        errors = []
        stream = (Stream.from_(client.queue(src))
                  .gate(token_bucket_gate(capacity=CAPACITY, refill_per_sec=REFILL_PER_SEC))
                  .to(client.queue(sink)))
        runner = await stream.run(unique("query"), url=broker.url, batch_size=50,
                                  on_error=lambda err, ctx: errors.append((str(err), ctx)))
        # The SDK's streams HTTP client retries a cycle on network errors 3 times (~0.7 s):
        # less than a reboot. Stretch it (its own `retry_attempts` knob, backoff capped at
        # 5 s) so a cycle the kill cut is retried against the restarted broker.
        runner.http.retry_attempts = 40
        cut = CutCycle(runner.http._client, broker, after=TOTAL // 3)
        runner.http._client = cut

        # Mid-run (a third of the messages committed through the gate) the broker is killed
        # right after it committed a cycle whose answer then never reaches the client, which
        # retries it against the restarted broker: it must be answered from the cycle memory
        # (`replayed`), not applied twice.
        await _wait_for(lambda: cut.killed.is_set(), 60, "a third of the source to pass the gate")
        passed_at_kill = cut.pushed
        await asyncio.sleep(1.0)  # the runner's pops and the cut cycle's retries fail meanwhile
        await broker.start()

        # Read the sink (acked pops of one group) until every id arrived, then a quiet look.
        got = []
        deadline = time.monotonic() + 90
        while len(got) < TOTAL and time.monotonic() < deadline:
            got.extend(await pop_all(client, sink, group="check", batch=500))
            await asyncio.sleep(0.2)
        await asyncio.sleep(3)
        got.extend(await pop_all(client, sink, group="check", batch=500))
        metrics = runner.metrics()
        await runner.stop()
        runner = None

        assert passed_at_kill < TOTAL, "the kill came after the stream had finished"
        assert cut.retried_answer is not None, "the cut cycle was never answered after the kill"
        assert cut.retried_answer.get("replayed") is True, cut.retried_answer
        assert broker.killed == [-signal.SIGKILL], broker.killed
        ids = [m["data"]["id"] for m in got]
        missing = {f"{p}-{i}" for p in range(PARTITIONS) for i in range(PER_PARTITION)} - set(ids)
        dups = sorted({i for i in ids if ids.count(i) > 1})
        assert not missing and not dups and len(ids) == TOTAL, (
            f"{len(ids)} sink messages for {TOTAL} sources; "
            f"missing {sorted(missing)[:20]} ({len(missing)}), duplicated {dups[:20]} ({len(dups)}); "
            f"runner errors {errors[:5]}")
        # Per partition, the sink holds the source's order.
        for p in range(PARTITIONS):
            order = [int(i.split("-")[1]) for i in ids if i.startswith(f"{p}-")]
            assert order == list(range(PER_PARTITION)), f"partition p{p} out of order"
        assert metrics.get("gateDenialsTotal", 0) > 0, "the bucket never ran dry"

        # The source is fully acked for the stream's group.
        left = await pop_all(client, src, group=f"streams.{metrics['queryId']}", ack=False)
        assert left == [], f"{len(left)} source messages left unacked"

        # The gate's state (key = source partition id) counts exactly what passed it.
        partition_ids = {m["partition"]: m["partitionId"]
                         for m in await pop_all(client, src, group=unique("ids"), batch=500,
                                                ack=False)}
        assert len(partition_ids) == PARTITIONS
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as h:
            for name, pid in partition_ids.items():
                r = await h.post("/streams/v1/state/get", json={
                    "query_id": metrics["serverQueryId"], "partition_id": pid, "keys": []})
                assert r.status_code == 200, r.text
                rows = {row["key"]: row["value"] for row in r.json()["rows"]}
                assert list(rows) == [str(pid)], rows
                bucket = rows[str(pid)]
                assert bucket["allowedTotal"] == PER_PARTITION, (name, bucket)
                assert bucket["consumedTotal"] == PER_PARTITION, (name, bucket)
                assert 0 <= bucket["tokens"] <= CAPACITY, (name, bucket)
    finally:
        if runner is not None:
            await runner.stop()
        await client.close()
        broker.stop()

