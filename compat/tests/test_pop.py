"""Pop (docs/wire.md §7): empty, after a push, long-poll woken by a push, autoAck, targeted and
discovery shapes, batch caps, one leased batch per partition, lease expiry."""

import asyncio
import re
import time

from support import MODE, POP_FRAMED_CONTENT_TYPE, make_client, pop_now, push_payloads, unique

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


async def test_pop_of_an_empty_queue_is_empty(client):
    q = unique("pop-empty")
    await client.queue(q).create()
    assert await pop_now(client.queue(q).batch(1)) == []


async def test_pop_of_a_queue_that_does_not_exist_is_empty(client):
    assert await pop_now(client.queue(unique("pop-nothing")).batch(5)) == []


async def test_waiting_pop_on_an_empty_queue_returns_empty_by_its_timeout(client):
    q = unique("pop-wait-empty")
    await client.queue(q).create()
    started = time.monotonic()
    res = await client.queue(q).batch(1).wait(True).timeout_millis(1500).pop()
    elapsed = time.monotonic() - started
    print(f"empty long-poll with timeout 1500 ms answered after {elapsed * 1000:.0f} ms")
    assert res == []
    # The client's HTTP timeout is timeout + 5 s; the broker must answer well before it.
    assert elapsed < 6.0


async def test_pop_after_push_delivers_the_message_with_its_fields(client):
    q = unique("pop-one")
    res = await push_payloads(client, q, [{"hello": "world"}], prefix="p")
    (msg,) = await pop_now(client.queue(q).batch(1))
    assert msg["id"] == res[0]["message_id"]
    assert msg["transactionId"] == "p-0"
    assert msg["data"] == {"hello": "world"}
    assert msg["partition"] == "Default"
    assert msg["partitionId"].isdigit(), f"partitionId must be a decimal string: {msg['partitionId']!r}"
    assert msg["leaseId"], "a leased pop carries a leaseId"
    assert msg["consumerGroup"] in ("__QUEUE_MODE__", None, "")
    assert ISO_MS.match(msg["createdAt"]), msg["createdAt"]
    assert msg["deliveryAttempt"] == 1
    assert isinstance(msg["offset"], int)
    assert msg["producerSub"] is None


async def test_waiting_pop_is_woken_by_a_later_push(client):
    q = unique("pop-wake")
    await client.queue(q).create()

    async def push_later():
        await asyncio.sleep(1.0)
        await push_payloads(client, q, [{"late": True}])

    started = time.monotonic()
    pusher = asyncio.create_task(push_later())
    res = await client.queue(q).batch(1).wait(True).timeout_millis(20000).pop()
    elapsed = time.monotonic() - started
    await pusher
    print(f"long-poll woken by a push 1 s later answered after {elapsed * 1000:.0f} ms")
    assert [m["data"] for m in res] == [{"late": True}]
    assert elapsed < 15.0, "the pop waited for its deadline instead of being woken"


async def test_waiting_pop_on_a_new_queue_is_woken_by_the_push_that_creates_it(client):
    q = unique("pop-wake-new")

    async def push_later():
        await asyncio.sleep(1.0)
        await push_payloads(client, q, [{"first": True}])

    pusher = asyncio.create_task(push_later())
    res = await client.queue(q).batch(1).wait(True).timeout_millis(10000).pop()
    await pusher
    assert [m["data"] for m in res] == [{"first": True}]


async def test_commit_on_delivery_holds_no_lease_and_is_not_redelivered(client):
    q = unique("pop-autoack")
    await push_payloads(client, q, [{"n": 1}, {"n": 2}], prefix="a")
    msgs = await client.queue(q).batch(1).wait(False).commit_on_delivery().pop()
    assert [m["data"] for m in msgs] == [{"n": 1}]
    assert not msgs[0]["leaseId"], "an autoAck pop holds no lease"
    rest = await pop_now(client.queue(q).batch(10))
    assert [m["data"] for m in rest] == [{"n": 2}], "the auto-acked message came back"


async def test_commit_on_delivery_shows_consumed_in_the_message_detail(client):
    q = unique("pop-autoack-detail")
    await push_payloads(client, q, [{"n": 1}], prefix="d")
    (msg,) = await client.queue(q).batch(1).wait(True).commit_on_delivery().pop()
    detail = await client.admin.get_message(msg["partitionId"], "d-0")
    (group,) = detail["consumerGroups"]
    assert group["consumed"] is True
    assert group["leaseExpiresAt"] is None
    assert detail["data"] == {"n": 1}


async def test_batch_caps_the_answer_and_keeps_order(client):
    q = unique("pop-batch")
    await push_payloads(client, q, [{"i": i} for i in range(10)])
    first = await pop_now(client.queue(q).batch(3))
    assert [m["data"]["i"] for m in first] == [0, 1, 2]
    assert len({m["leaseId"] for m in first}) == 1
    ack = await client.ack(first)
    assert ack["success"], ack
    second = await pop_now(client.queue(q).batch(3))
    assert [m["data"]["i"] for m in second] == [3, 4, 5]


async def test_a_leased_partition_is_skipped_by_a_second_pop(client):
    q = unique("pop-one-lease")
    await push_payloads(client, q, [{"i": i} for i in range(4)])
    first = await pop_now(client.queue(q).batch(2))
    assert len(first) == 2
    # Same group, same (only) partition: one in-flight leased batch, so nothing for anyone.
    assert await pop_now(client.queue(q).batch(2)) == []
    other = make_client()
    try:
        assert await pop_now(other.queue(q).batch(2)) == []
    finally:
        await other.close()
    assert (await client.ack(first))["success"]
    assert [m["data"]["i"] for m in await pop_now(client.queue(q).batch(10))] == [2, 3]


async def test_expired_lease_redelivers_with_a_new_lease(client):
    q = unique("pop-expire")
    await client.queue(q).config({"lease_time": 1}).create()
    await push_payloads(client, q, [{"n": 1}])
    (first,) = await pop_now(client.queue(q).batch(1))
    await asyncio.sleep(1.6)
    (again,) = await pop_now(client.queue(q).batch(1))
    assert again["id"] == first["id"]
    assert again["leaseId"] != first["leaseId"]
    assert again["deliveryAttempt"] == 2
    stale = await client.ack(first)
    assert stale["success"] is False and "lease" in stale["error"].lower(), stale
    assert (await client.ack(again))["success"]
    assert await pop_now(client.queue(q).batch(1)) == []


async def test_delayed_processing_hides_messages_until_they_are_old_enough(client):
    q = unique("pop-delayed")
    await client.queue(q).config({"delayed_processing": 2}).create()
    await push_payloads(client, q, [{"n": 1}])
    assert await pop_now(client.queue(q).batch(1)) == []
    await asyncio.sleep(2.3)
    assert [m["data"] for m in await pop_now(client.queue(q).batch(1))] == [{"n": 1}]


async def test_window_buffer_holds_a_partition_until_it_is_quiet(client):
    q = unique("pop-window")
    await client.queue(q).config({"window_buffer": 2}).create()
    await push_payloads(client, q, [{"n": 1}])
    await asyncio.sleep(1.0)
    await push_payloads(client, q, [{"n": 2}])
    # The newest segment is younger than 2 s: nothing of the partition is served yet.
    assert await pop_now(client.queue(q).batch(10)) == []
    await asyncio.sleep(2.3)
    assert [m["data"]["n"] for m in await pop_now(client.queue(q).batch(10))] == [1, 2]


async def test_targeted_pop_reads_only_its_partition(client):
    q = unique("pop-targeted")
    await push_payloads(client, q, [{"p": "a"}], partition="lane-a")
    await push_payloads(client, q, [{"p": "b", "i": i} for i in range(3)], partition="lane-b")
    msgs = await pop_now(client.queue(q).partition("lane-b").batch(10))
    assert [m["data"]["i"] for m in msgs] == [0, 1, 2]
    assert {m["partition"] for m in msgs} == {"lane-b"}
    rest = await pop_now(client.queue(q).partition("lane-a").batch(10))
    assert [m["data"] for m in rest] == [{"p": "a"}]


async def test_partition_names_with_spaces_and_unicode(client):
    q = unique("pop-names")
    lane = "customer 42 é"
    await push_payloads(client, q, [{"ok": 1}], partition=lane)
    msgs = await pop_now(client.queue(q).partition(lane).batch(10))
    assert [m["partition"] for m in msgs] == [lane]


async def test_discovery_pop_by_namespace_and_task(client):
    ns = unique("ns")
    q1, q2 = unique("disc-a"), unique("disc-b")
    await client.queue(q1).namespace(ns).task("billing").create()
    await client.queue(q2).namespace(ns).task("shipping").create()
    await push_payloads(client, q1, [{"q": 1}])
    await push_payloads(client, q2, [{"q": 2}])
    billing = await pop_now(client.queue().namespace(ns).task("billing").batch(10))
    assert [m["data"] for m in billing] == [{"q": 1}]
    assert (await client.ack(billing))["success"]
    everything = await pop_now(client.queue().namespace(ns).batch(10).partitions(10))
    assert [m["data"] for m in everything] == [{"q": 2}]


async def test_autopilot_pop_without_batch_returns_the_backlog(client):
    q = unique("pop-autopilot")
    await push_payloads(client, q, [{"i": i} for i in range(5)])
    # No batch(): the client sends autopilot=true and lets the broker size the pop.
    res = await client.queue(q).wait(False).pop_result()
    assert [m["data"]["i"] for m in res.messages] == list(range(5))


async def test_empty_pop_is_a_bodiless_204(client, transport):
    q = unique("pop-204")
    await client.queue(q).create()
    assert await pop_now(client.queue(q).batch(1)) == []
    (ex,) = transport.matching("GET", f"/api/v1/pop/queue/{q}")
    assert ex.status == 204
    assert ex.response_body == b""
    assert "content-length" not in ex.response_headers


async def test_pop_answer_uses_the_requested_wire_form(client, transport):
    q = unique("pop-wire")
    await push_payloads(client, q, [{"i": i} for i in range(3)])
    msgs = await pop_now(client.queue(q).batch(10))
    assert len(msgs) == 3
    (ex,) = transport.matching("GET", f"/api/v1/pop/queue/{q}")
    assert ex.status == 200
    if MODE == "binary":
        assert "frames=true" in ex.path
        assert ex.response_body[:4] == b"QPF1", "framed_pop asked for QPF1 and got JSON"
        assert ex.response_headers.get("content-type", "").startswith(POP_FRAMED_CONTENT_TYPE)
    else:
        assert ex.response_headers.get("content-type", "").startswith("application/json")
