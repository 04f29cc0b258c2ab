"""Streams (docs/wire.md §19): the official client's `Stream` API run end to end against our
/streams/v1 routes, from one queue to another: every source message reaches the sink exactly
once, through a stateless map, through a token-bucket gate (partial acks, denied tails
redelivered in order), and through a tumbling window whose idle flush reads ripe state."""

import asyncio
import time

import pytest
from queen.streams import Stream, token_bucket_gate
from queen.streams.runtime.register import StreamsConfigHashMismatch

from support import SERVER_URL, pop_all, push_payloads, unique

PARTITIONS = 3
PER_PARTITION = 20


async def _fill_source(client, lease_time=30):
    """One push per message, a few milliseconds apart. The runner orders a popped batch by
    (createdAt, id) in milliseconds; a binary push mints its ids with one millisecond and a
    random tail, so messages pushed in one binary request would be processed in a random
    order (a gate's partial ack then cannot name a prefix of the log)."""
    src = unique("stream-src")
    await client.queue(src).config({"lease_time": lease_time}).create()
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            await push_payloads(client, src, [{"p": p, "i": i}], partition=f"p{p}")
            await asyncio.sleep(0.003)
    return src


async def _collect(client, sink, want, timeout=90):
    """Everything the sink receives until `want` messages arrived, then one more quiet look."""
    group = unique("check")
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(await pop_all(client, sink, group=group))
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.5)
    got.extend(await pop_all(client, sink, group=group))
    return got


def _every_source_message():
    return sorted((p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION))


async def _run(stream, **opts):
    errors = []
    runner = await stream.run(unique("query"), url=SERVER_URL,
                              on_error=lambda err, ctx: errors.append((str(err), ctx)), **opts)
    return runner, errors


async def test_stream_map_reaches_the_sink_exactly_once(client):
    src, sink = await _fill_source(client), unique("stream-sink")
    stream = (Stream.from_(client.queue(src))
              .map(lambda msg: {**msg["data"], "mapped": True})
              .to(client.queue(sink)))
    runner, errors = await _run(stream, batch_size=7)
    try:
        got = await _collect(client, sink, PARTITIONS * PER_PARTITION)
    finally:
        await runner.stop()
    assert errors == []
    assert all(m["data"]["mapped"] is True for m in got)
    assert sorted((m["data"]["p"], m["data"]["i"]) for m in got) == _every_source_message()
    # The sink partition follows the source partition, in source order.
    for p in range(PARTITIONS):
        order = [m["data"]["i"] for m in got if m["data"]["p"] == p]
        assert order == list(range(PER_PARTITION))
        assert {m["partition"] for m in got if m["data"]["p"] == p} == {f"p{p}"}
    assert runner.metrics()["cyclesTotal"] >= PARTITIONS


async def test_token_bucket_gate_passes_every_message_once(client):
    # A short lease: a denied tail comes back soon, in order, and is gated again.
    src, sink = await _fill_source(client, lease_time=1), unique("stream-gated")
    stream = (Stream.from_(client.queue(src))
              .gate(token_bucket_gate(capacity=5, refill_per_sec=40))
              .to(client.queue(sink)))
    runner, errors = await _run(stream, batch_size=10)
    try:
        got = await _collect(client, sink, PARTITIONS * PER_PARTITION)
    finally:
        await runner.stop()
    assert errors == []
    assert sorted((m["data"]["p"], m["data"]["i"]) for m in got) == _every_source_message()
    for p in range(PARTITIONS):
        assert [m["data"]["i"] for m in got if m["data"]["p"] == p] == list(range(PER_PARTITION))
    assert runner.metrics().get("gateDenialsTotal", 0) > 0, "the bucket never ran dry"


async def test_tumbling_window_counts_flush_once(client):
    src, sink = await _fill_source(client), unique("stream-windows")
    stream = (Stream.from_(client.queue(src))
              .window_tumbling(seconds=1, idle_flush_ms=200)
              .reduce(lambda acc, v: acc + 1, 0)
              .to(client.queue(sink)))
    runner, errors = await _run(stream, batch_size=50)
    try:
        got = await _collect(client, sink, PARTITIONS, timeout=30)
        # Quiet partitions: the idle flush closes their windows from the ripe state rows.
        deadline = time.monotonic() + 10
        while sum(_count(m) for m in got) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            got.extend(await _collect(client, sink, 1, timeout=2))
    finally:
        await runner.stop()
    assert errors == []
    assert sum(_count(m) for m in got) == PARTITIONS * PER_PARTITION, [m["data"] for m in got]


def _count(m):
    data = m["data"]
    return data["value"] if isinstance(data, dict) and "value" in data else data


async def test_a_changed_stream_needs_reset(client):
    src = await _fill_source(client)
    name = unique("query")
    first = Stream.from_(client.queue(src)).map(lambda v: v).to(client.queue(unique("a")))
    runner = await first.run(name, url=SERVER_URL)
    await runner.stop()
    changed = Stream.from_(client.queue(src)).filter(lambda v: True).to(client.queue(unique("b")))
    with pytest.raises(StreamsConfigHashMismatch):
        await changed.run(name, url=SERVER_URL)
    runner = await changed.run(name, url=SERVER_URL, reset=True)
    await runner.stop()
