"""Ephemeral queues (docs/wire.md §25, docs/engine.md §17) through the official client's
`client.ephemeral` (`queen/ephemeral`, which ships no tests): configure, push (direct and
buffered), pop (groups, partitions, long poll, commit on delivery), the four ack outcomes,
depth and the listing, reset and delete, and the two 404s the client tells apart."""

import asyncio
import time

import pytest
from queen.ephemeral import EPHEMERAL_QUEUE_NOT_FOUND
from queen.errors import EphemeralError, EphemeralQueueNotFoundError

from support import unique


async def test_round_trip_with_every_ack_outcome(client):
    eph = client.ephemeral
    q = unique("eph")
    answer = await eph.configure(q, retry_limit=1, lease_seconds=30)
    assert answer["options"]["retryLimit"] == 1
    assert await eph.push(q, [{"n": 1}, {"payload": {"n": 2}}, {"data": {"n": 3}}]) == {
        "queue": q, "partition": "Default", "pushed": 3, "dropped": 0}

    got = await eph.pop(q, batch=10)
    assert got["queue"] == q
    messages = got["messages"]
    assert [m["payload"] for m in messages] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert [m["attempts"] for m in messages] == [1, 1, 1]
    assert all(m["id"].startswith("e:") and m["partition"] == "Default" for m in messages)

    first, second, third = messages
    result = await eph.ack(q, [first, {"id": second["id"], "status": "retry"}])
    assert [r["outcome"] for r in result["results"]] == ["acked", "redelivered"]
    assert (await eph.ack(q, first))["results"][0]["outcome"] == "unknown"

    again = (await eph.pop(q, batch=10))["messages"]
    assert [(m["id"], m["attempts"]) for m in again] == [(second["id"], 2)]
    spent = await eph.ack(q, again, status=False)
    assert [r["outcome"] for r in spent["results"]] == ["acked"], "retries spent: dropped"
    depth = await eph.depth(q)
    assert depth["dropped"]["retry"] == 1 and depth["declared"] is True

    assert (await eph.reset(q))["dropped"] == 1
    stale = await eph.ack(q, third)
    assert [r["outcome"] for r in stale["results"]] == ["stale"]
    assert (await eph.pop(q))["messages"] == []


async def test_groups_partitions_and_commit_on_delivery(client):
    eph = client.ephemeral
    q = unique("eph-groups")
    await eph.push(q, ["a1", "a2"], partition="room-a")
    await eph.push(q, ["b1"], partition="room-b")
    room_b = await eph.pop(q, partition="room-b", group="workers", batch=10)
    assert [m["payload"] for m in room_b["messages"]] == ["b1"]
    tail = await eph.pop(q, partition="room-a", group="tail", commit_on_delivery=True, batch=10)
    assert [m["payload"] for m in tail["messages"]] == ["a1", "a2"]
    assert (await eph.pop(q, partition="room-a", group="tail"))["messages"] == []
    workers = await eph.pop(q, partition="room-a", group="workers", batch=10)
    assert [m["payload"] for m in workers["messages"]] == ["a1", "a2"], "fan-out"
    late = await eph.ack(q, tail["messages"], group="tail")
    assert [r["outcome"] for r in late["results"]] == ["unknown", "unknown"]
    done = await eph.ack(q, workers["messages"] + room_b["messages"], group="workers")
    assert [r["outcome"] for r in done["results"]] == ["acked"] * 3


async def test_a_waiting_pop_is_woken_by_a_buffered_push(client):
    eph = client.ephemeral
    q = unique("eph-wait")
    started = time.monotonic()
    waiter = asyncio.create_task(eph.pop(q, wait=True, timeout=20000))
    await asyncio.sleep(0.3)
    answer = await eph.push(q, [{"k": "v"}], buffered={"message_count": 100, "time_millis": 50})
    assert answer == {"buffered": True, "count": 1}
    await eph.flush(q)
    got = await waiter
    assert [m["payload"] for m in got["messages"]] == [{"k": "v"}]
    assert time.monotonic() - started < 10
    empty = await eph.pop(q, wait=True, timeout=200)
    assert empty["messages"] == []


async def test_bounds_depth_listing_delete_and_the_two_404s(client):
    eph = client.ephemeral
    q = unique("eph-bounds")
    await eph.configure(q, {"maxLength": 2, "policy": "reject"})
    await eph.push(q, [1, 2])
    with pytest.raises(EphemeralError) as full:
        await eph.push(q, [3])
    assert full.value.code == "queue_full"

    feed = unique("eph-feed")
    await eph.configure(feed, max_length=2, policy="dropOldest")
    for n in range(5):
        await eph.push(feed, [n])
    assert [m["payload"] for m in (await eph.pop(feed, batch=10))["messages"]] == [3, 4]
    assert (await eph.depth(feed))["dropped"]["bounds"] == 3

    listed = {row["queue"]: row for row in (await eph.queues())["queues"]}
    assert listed[q]["length"] == 2 and listed[q]["declared"] is True

    assert (await eph.delete(q)) == {"queue": q, "deleted": True, "declared": True}
    assert (await eph.delete(q))["deleted"] is False
    with pytest.raises(EphemeralQueueNotFoundError) as missing:
        await eph.depth(q)
    assert missing.value.code == EPHEMERAL_QUEUE_NOT_FOUND
    assert missing.value.queue == q

    with pytest.raises(EphemeralError) as refused:
        await eph.configure(q, {"maxLength": 0})
    assert refused.value.code == "ephemeral_bad_request"
