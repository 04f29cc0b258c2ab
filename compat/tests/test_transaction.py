"""Transactions (docs/wire.md §10): push+ack bundles commit atomically; any refused part rolls the
whole bundle back, pushes included."""

import asyncio

import pytest

from support import MODE, PUSH_BINARY_CONTENT_TYPE, pop_now, push_payloads, unique


async def _leased(client, n=1, lease_time=30, **config):
    q = unique("txn-src")
    await client.queue(q).config({"lease_time": lease_time, **config}).create()
    await push_payloads(client, q, [{"v": i} for i in range(1, n + 1)], prefix=q)
    msgs = await pop_now(client.queue(q).batch(n))
    assert len(msgs) == n
    return q, msgs


async def test_push_and_ack_commit_together(client):
    src, (msg,) = await _leased(client)
    dst = unique("txn-dst")
    res = await (client.transaction().queue(dst).push([{"data": {"v": msg["data"]["v"] + 1}}])
                 .ack(msg).commit())
    assert res["success"] is True
    assert [r["type"] for r in res["results"]] == ["push", "ack"]
    assert [m["data"] for m in await pop_now(client.queue(dst).batch(10))] == [{"v": 2}]
    assert await pop_now(client.queue(src).batch(10)) == []


async def test_bundle_spanning_queues_partitions_and_acks(client):
    src, msgs = await _leased(client, n=3)
    b, c = unique("txn-b"), unique("txn-c")
    tx = client.transaction()
    for m in msgs:
        tx = tx.ack(m)
    tx = tx.queue(b).partition("left").push([{"data": {"to": "b-left"}}])
    tx = tx.queue(b).partition("right").push([{"data": {"to": "b-right"}}])
    tx = tx.queue(c).push([{"data": {"to": "c", "sum": sum(m["data"]["v"] for m in msgs)}}])
    res = await tx.commit()
    assert res["success"] is True
    assert len(res["results"]) == 6
    assert await pop_now(client.queue(src).batch(10)) == []
    left = await pop_now(client.queue(b).partition("left").batch(10))
    right = await pop_now(client.queue(b).partition("right").batch(10))
    assert [m["data"] for m in left] == [{"to": "b-left"}]
    assert [m["data"] for m in right] == [{"to": "b-right"}]
    assert [m["data"] for m in await pop_now(client.queue(c).batch(10))] == [{"to": "c", "sum": 6}]


async def test_pipeline_of_bundles(client):
    stages = [unique(f"txn-stage{i}") for i in range(3)]
    await push_payloads(client, stages[0], [{"hops": 0}])
    for here, there in zip(stages, stages[1:]):
        (msg,) = await pop_now(client.queue(here).batch(1))
        res = await (client.transaction().queue(there).push([{"data": {"hops": msg["data"]["hops"] + 1}}])
                     .ack(msg).commit())
        assert res["success"] is True
    (last,) = await pop_now(client.queue(stages[-1]).batch(1))
    assert last["data"] == {"hops": 2}
    for s in stages[:-1]:
        assert await pop_now(client.queue(s).batch(1)) == []


async def test_foreign_lease_rolls_back_the_whole_bundle(client):
    src, (msg,) = await _leased(client)
    dst = unique("txn-dst")
    forged = {**msg, "leaseId": "01a00000-0000-7000-8000-000000000000"}
    with pytest.raises(Exception) as err:
        await client.transaction().queue(dst).push([{"data": {"x": 1}}]).ack(forged).commit()
    assert "rolled back" in str(err.value)
    assert await pop_now(client.queue(dst).batch(10)) == [], "the push of a refused bundle was stored"
    assert (await client.ack(msg))["success"], "the real lease must be intact"


async def test_expired_lease_rolls_back_and_the_message_redelivers(client):
    src, (msg,) = await _leased(client, lease_time=1)
    dst = unique("txn-dst")
    await asyncio.sleep(1.6)
    with pytest.raises(Exception) as err:
        await client.transaction().queue(dst).push([{"data": {"x": 1}}]).ack(msg).commit()
    assert "rolled back" in str(err.value)
    assert await pop_now(client.queue(dst).batch(10)) == []
    (again,) = await pop_now(client.queue(src).batch(1))
    assert again["transactionId"] == msg["transactionId"]


async def test_unresolvable_ack_rolls_back(client):
    src, (msg,) = await _leased(client)
    dst = unique("txn-dst")
    ghost = {**msg, "transactionId": f"{src}-ghost"}
    with pytest.raises(Exception) as err:
        await client.transaction().ack(msg).queue(dst).push([{"data": {"x": 1}}]).ack(ghost).commit()
    assert "rolled back" in str(err.value)
    assert await pop_now(client.queue(dst).batch(10)) == []
    # The real ack in the refused bundle did not land either: the lease still holds it.
    assert await pop_now(client.queue(src).batch(1)) == []
    assert (await client.ack(msg))["success"]


async def test_bundle_spanning_two_leases_with_one_expired_is_refused_whole(client):
    q = unique("txn-two-leases")
    await client.queue(q).config({"lease_time": 2}).create()
    await push_payloads(client, q, [{"lane": "a"}], partition="a")
    await push_payloads(client, q, [{"lane": "b"}], partition="b")
    (ma,) = await pop_now(client.queue(q).partition("a").batch(1))
    await asyncio.sleep(2.4)
    (mb,) = await pop_now(client.queue(q).partition("b").batch(1))
    dst = unique("txn-dst")
    with pytest.raises(Exception) as err:
        await client.transaction().ack(ma).ack(mb).queue(dst).push([{"data": {}}]).commit()
    assert "rolled back" in str(err.value)
    assert await pop_now(client.queue(dst).batch(1)) == []
    res = await client.transaction().ack(mb).queue(dst).push([{"data": {"ok": 1}}]).commit()
    assert res["success"] is True


async def test_failed_ack_in_a_bundle_dead_letters(client):
    src, (msg,) = await _leased(client, retry_limit=0)
    dst = unique("txn-dst")
    res = await client.transaction().ack(msg, "failed").queue(dst).push([{"data": {"n": 1}}]).commit()
    assert res["success"] is True
    assert await pop_now(client.queue(src).batch(1)) == []
    (row,) = (await client.queue(src).dlq().get())["messages"]
    assert row["transactionId"] == msg["transactionId"]


async def test_group_context_acks_the_groups_cursor(client):
    q = unique("txn-group")
    g = unique("g")
    await push_payloads(client, q, [{"n": 1}])
    (msg,) = await pop_now(client.queue(q).group(g).batch(1))
    dst = unique("txn-dst")
    res = await (client.transaction().ack(msg, "completed", {"consumer_group": g})
                 .queue(dst).push([{"data": {"n": 2}}]).commit())
    assert res["success"] is True
    assert await pop_now(client.queue(q).group(g).batch(1)) == []
    assert [m["data"] for m in await pop_now(client.queue(q).batch(1))] == [{"n": 1}]


async def test_push_only_bundle_and_its_message_ids(client):
    dst = unique("txn-push-only")
    res = await (client.transaction().queue(dst).push(
        [{"data": {"i": i}, "transactionId": f"t-{i}"} for i in range(3)]).commit())
    assert res["success"] is True
    ids = [r["messageId"] for r in res["results"]]
    msgs = await pop_now(client.queue(dst).batch(10))
    assert [m["id"] for m in msgs] == ids
    assert [m["transactionId"] for m in msgs] == ["t-0", "t-1", "t-2"]


async def test_consume_loop_commits_a_bundle_per_message(client):
    src, dst = unique("txn-loop-src"), unique("txn-loop-dst")
    await push_payloads(client, src, [{"i": i} for i in range(5)])

    async def handler(msg):
        await (client.transaction().queue(dst).push([{"data": {"i": msg["data"]["i"] * 10}}])
               .ack(msg).commit())

    await client.queue(src).batch(5).wait(False).limit(5).auto_ack(False).each().consume(handler)
    assert await pop_now(client.queue(src).batch(10)) == []
    assert [m["data"]["i"] for m in await pop_now(client.queue(dst).batch(10))] == [0, 10, 20, 30, 40]


async def test_large_payload_in_a_bundle(client):
    dst = unique("txn-big")
    blob = {"text": "y" * 40_000}
    assert (await client.transaction().queue(dst).push([{"data": blob}]).commit())["success"]
    (msg,) = await pop_now(client.queue(dst).batch(1))
    assert msg["data"] == blob


async def test_transaction_uses_the_requested_wire_form(client, transport):
    src, (msg,) = await _leased(client)
    dst = unique("txn-wire")
    await client.transaction().queue(dst).push([{"data": {}}]).ack(msg).commit()
    (ex,) = transport.matching("POST", "/api/v1/transaction")
    assert ex.status == 200
    if MODE == "binary":
        assert ex.request_head == b"QTB1"
        assert ex.request_content_type == PUSH_BINARY_CONTENT_TYPE
    else:
        assert ex.request_content_type.startswith("application/json")
