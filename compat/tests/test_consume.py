"""Consume loops of the client (ConsumerManager): each(), batches, limit, concurrency and
per-partition order, multi-partition pops, lease renewal, manual acks."""

import asyncio
from collections import defaultdict

from support import make_client, pop_now, push_payloads, unique


async def test_each_hands_single_messages_and_acks_them_one_by_one(client):
    q = unique("each")
    await client.queue(q).config({"lease_time": 1}).create()
    await push_payloads(client, q, [{"i": i} for i in range(8)])
    seen = []

    async def handler(msg):
        assert isinstance(msg, dict)
        seen.append(msg["data"]["i"])

    await client.queue(q).batch(8).wait(False).limit(5).each().consume(handler)
    assert seen == [0, 1, 2, 3, 4]
    # The loop stopped inside its batch: the five handled messages were acked one by one,
    # the other three stay leased until the 1 s lease expires and then redeliver.
    await asyncio.sleep(1.6)
    rest = await pop_now(client.queue(q).batch(10))
    assert [m["data"]["i"] for m in rest] == [5, 6, 7]
    # The redelivered batch starts at a new offset (the acks moved the cursor), so it counts
    # as a first attempt (docs/engine.md §5.3: attempt_count grows only from the same start offset).
    assert {m["deliveryAttempt"] for m in rest} == {1}


async def test_batch_handler_gets_a_list_and_the_batch_is_acked(client):
    q = unique("batch")
    await push_payloads(client, q, [{"i": i} for i in range(3)])
    got = []

    async def handler(msgs):
        got.append([m["data"]["i"] for m in msgs])

    await client.queue(q).batch(10).wait(False).limit(1).consume(handler)
    assert got == [[0, 1, 2]]
    assert await pop_now(client.queue(q).batch(10)) == [], "the batch was not acked"


async def test_limit_stops_the_loop_after_that_many_messages(client):
    q = unique("limit")
    await push_payloads(client, q, [{"i": i} for i in range(30)])
    got = []

    async def handler(msgs):
        got.extend(m["data"]["i"] for m in msgs)

    await client.queue(q).batch(10).wait(False).limit(20).consume(handler)
    assert got == list(range(20))
    rest = await pop_now(client.queue(q).batch(100))
    assert [m["data"]["i"] for m in rest] == list(range(20, 30))


async def test_idle_millis_stops_a_drained_loop(client):
    q = unique("idle")
    await push_payloads(client, q, [{"i": i} for i in range(12)])
    got = []

    async def handler(msg):
        got.append(msg["data"]["i"])

    await client.queue(q).batch(5).wait(False).idle_millis(1000).each().consume(handler)
    assert got == list(range(12))


async def test_concurrency_keeps_order_within_each_partition(client):
    q = unique("concurrency")
    lanes = [f"lane-{p}" for p in range(5)]
    per_lane = 20
    for lane in lanes:
        await push_payloads(client, q, [{"lane": lane, "seq": s} for s in range(per_lane)], partition=lane)
    seen = defaultdict(list)
    in_flight = defaultdict(int)
    overlaps = []

    async def handler(msg):
        lane = msg["data"]["lane"]
        in_flight[lane] += 1
        if in_flight[lane] > 1:
            overlaps.append(lane)
        seen[lane].append(msg["data"]["seq"])
        await asyncio.sleep(0.005)
        in_flight[lane] -= 1

    await client.queue(q).concurrency(10).batch(4).wait(False).idle_millis(2000).each().consume(handler)
    assert not overlaps, f"two workers held the same partition at once: {overlaps}"
    for lane in lanes:
        assert seen[lane] == list(range(per_lane)), f"{lane} delivered out of order: {seen[lane]}"


async def test_concurrency_on_one_partition_serialises(client):
    q = unique("concurrency-one")
    await push_payloads(client, q, [{"seq": s} for s in range(30)])
    seen = []

    async def handler(msg):
        seen.append(msg["data"]["seq"])

    # Ten workers, three messages each: ends only if every message is delivered exactly once.
    await asyncio.wait_for(
        client.queue(q).concurrency(10).batch(1).wait(False).limit(3).each().consume(handler), 60
    )
    assert seen == list(range(30))


async def test_multi_partition_pop_returns_every_partition_under_one_lease(client):
    q = unique("multi-part")
    for p in range(3):
        await push_payloads(client, q, [{"p": p, "m": 0}, {"p": p, "m": 1}], partition=f"p{p}")
    msgs = await pop_now(client.queue(q).batch(100).partitions(3))
    assert len(msgs) == 6
    assert len({m["partitionId"] for m in msgs}) == 3
    assert len({m["leaseId"] for m in msgs}) == 1
    by_part = defaultdict(list)
    for m in msgs:
        by_part[m["partition"]].append(m["data"]["m"])
    assert all(v == [0, 1] for v in by_part.values()), by_part
    assert (await client.ack(msgs))["success"]
    assert await pop_now(client.queue(q).batch(100).partitions(3)) == []


async def test_batch_is_a_global_cap_across_partitions(client):
    q = unique("multi-cap")
    for p in range(5):
        await push_payloads(client, q, [{"p": p, "m": m} for m in range(20)], partition=f"p{p}")
    got = []

    async def handler(msgs):
        got.append(len(msgs))

    await client.queue(q).batch(10).partitions(5).wait(False).limit(1).consume(handler)
    assert got == [10]


async def test_single_partition_pop_without_autopilot(client):
    q = unique("multi-one")
    for p in range(4):
        await push_payloads(client, q, [{"p": p, "m": m} for m in range(5)], partition=f"p{p}")
    msgs = await pop_now(client.queue(q).batch(100).autopilot(False))
    assert len(msgs) == 5
    assert len({m["partitionId"] for m in msgs}) == 1


async def test_renewed_lease_outlives_its_lease_time(client):
    q = unique("renew")
    await client.queue(q).config({"lease_time": 2}).create()
    await push_payloads(client, q, [{"job": "slow"}])
    handled = []
    other = make_client()
    stolen = []

    async def handler(msg):
        await asyncio.sleep(3.5)
        # Past the 2 s lease: only the renewals keep other consumers away.
        stolen.extend(await pop_now(other.queue(q).batch(1)))
        handled.append(msg["data"])

    try:
        await client.queue(q).batch(1).wait(False).limit(1).renew_lease(True, 700).each().consume(handler)
    finally:
        await other.close()
    assert handled == [{"job": "slow"}]
    assert stolen == [], "the message was redelivered while its lease was being renewed"
    assert await pop_now(client.queue(q).batch(1)) == [], "the renewed batch was not acked"


async def test_manual_renew_reports_the_new_expiry(client):
    q = unique("renew-manual")
    await push_payloads(client, q, [{"n": 1}])
    (msg,) = await pop_now(client.queue(q).batch(1))
    live = await client.renew(msg)
    assert live["success"] is True and live.get("renewed") == 1, live
    assert live["newExpiresAt"]
    assert (await client.ack(msg))["success"]
    gone = await client.renew(msg)
    assert gone["success"] is False and gone.get("renewed") == 0 and gone["newExpiresAt"] is None, gone


async def test_renew_extends_every_partition_of_a_multi_partition_pop(client):
    q = unique("renew-multi")
    for p in range(3):
        await push_payloads(client, q, [{"p": p}], partition=f"p{p}")
    msgs = await pop_now(client.queue(q).batch(10).partitions(3))
    assert len(msgs) == 3
    res = await client.renew(msgs)
    assert [r["success"] for r in res] == [True]
    assert res[0].get("renewed") == 3


async def test_manual_ack_with_auto_ack_off(client):
    q = unique("manual-ack")
    await client.queue(q).config({"lease_time": 1}).create()
    await push_payloads(client, q, [{"i": i} for i in range(4)])
    acks = []

    async def handler(msgs):
        acks.append(await client.ack(msgs[:2]))

    await client.queue(q).batch(4).wait(False).limit(1).auto_ack(False).consume(handler)
    assert acks[0]["success"], acks
    # Acking the first two committed them; the lease still covers the other two.
    assert await pop_now(client.queue(q).batch(4)) == []
    await asyncio.sleep(1.6)
    rest = await pop_now(client.queue(q).batch(4))
    assert [m["data"]["i"] for m in rest] == [2, 3]


async def test_trace_calls_are_accepted(client):
    q = unique("trace")
    await push_payloads(client, q, [{"n": 1}])
    results = []

    async def handler(msg):
        results.append(await msg["trace"]({"traceName": ["compat", "x"], "eventType": "info",
                                           "data": {"step": 1}}))

    await client.queue(q).batch(1).wait(False).limit(1).each().consume(handler)
    assert results and results[0]["success"] is True, results


async def test_competing_consumers_split_the_work_exactly_once(client):
    q = unique("compete")
    lanes, per_lane = 8, 40
    for p in range(lanes):
        await push_payloads(client, q, [{"lane": p, "seq": s} for s in range(per_lane)], partition=f"l{p}")
    seen = defaultdict(list)
    by_client = defaultdict(int)

    def handler_for(tag):
        async def handler(msgs):
            for m in msgs:
                seen[m["data"]["lane"]].append(m["data"]["seq"])
            by_client[tag] += len(msgs)
        return handler

    others = [make_client() for _ in range(2)]
    try:
        # Three clients, five workers each, all in queue mode on the same queue.
        await asyncio.gather(*[
            c.queue(q).concurrency(5).batch(7).wait(False).idle_millis(2000).consume(handler_for(i))
            for i, c in enumerate([client, *others])
        ])
    finally:
        for c in others:
            await c.close()
    print(f"messages per client: {dict(by_client)}")
    for p in range(lanes):
        assert seen[p] == list(range(per_lane)), f"lane {p}: {seen[p]}"


async def test_groups_consuming_at_once_each_get_everything(client):
    q = unique("groups-race")
    for p in range(4):
        await push_payloads(client, q, [{"lane": p, "seq": s} for s in range(25)], partition=f"l{p}")
    groups = [unique(f"g{i}") for i in range(3)]
    seen = {g: defaultdict(list) for g in groups}

    def handler_for(g):
        async def handler(msgs):
            for m in msgs:
                assert m["consumerGroup"] == g
                seen[g][m["data"]["lane"]].append(m["data"]["seq"])
        return handler

    await asyncio.gather(*[
        client.queue(q).group(g).concurrency(4).batch(5).wait(False).idle_millis(2000).consume(handler_for(g))
        for g in groups
    ])
    for g in groups:
        for p in range(4):
            assert seen[g][p] == list(range(25)), f"group {g} lane {p}: {seen[g][p]}"
