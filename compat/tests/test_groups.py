"""Named consumer groups (docs/wire.md §12): fan-out, subscription modes decided once, group
deletion, per-group acks and retry budgets."""

import asyncio

from support import iso_now, pop_all, pop_now, push_payloads, unique


async def _consume_all(client, q, group, mode=None, batch=100):
    got = []

    async def handler(msgs):
        got.extend(m["data"] for m in msgs)

    b = client.queue(q).group(group).batch(batch).wait(False).idle_millis(800)
    if mode:
        b = b.subscription_mode(mode)
    await b.consume(handler)
    return got


async def test_every_group_sees_every_message(client):
    q = unique("fanout")
    g1, g2 = unique("g1"), unique("g2")
    payloads = [{"i": i} for i in range(20)]
    await push_payloads(client, q, payloads)
    assert await _consume_all(client, q, g1, "from_beginning") == payloads
    assert await _consume_all(client, q, g2, "from_beginning") == payloads
    # Queue mode is one more independent reader.
    assert [m["data"] for m in await pop_all(client, q)] == payloads
    # Each group is drained for itself only.
    assert await pop_now(client.queue(q).group(g1).batch(10)) == []


async def test_group_messages_carry_the_group(client):
    q = unique("group-field")
    g = unique("g")
    await push_payloads(client, q, [{"n": 1}])
    (msg,) = await pop_now(client.queue(q).group(g).batch(1))
    assert msg["consumerGroup"] == g


async def test_default_subscription_is_from_the_beginning(client):
    q = unique("sub-default")
    g = unique("g")
    await push_payloads(client, q, [{"old": i} for i in range(3)])
    msgs = await pop_now(client.queue(q).group(g).batch(10))
    assert [m["data"] for m in msgs] == [{"old": 0}, {"old": 1}, {"old": 2}]


async def test_mode_new_skips_the_backlog_and_gets_later_pushes(client):
    q = unique("sub-new")
    g_new, g_all = unique("new"), unique("all")
    await push_payloads(client, q, [{"old": i} for i in range(5)])
    assert await pop_now(client.queue(q).group(g_new).subscription_mode("new").batch(10)) == []
    await push_payloads(client, q, [{"new": i} for i in range(3)])
    # All three later pushes come back in one pop.
    fresh = await pop_now(client.queue(q).group(g_new).batch(10))
    assert [m["data"] for m in fresh] == [{"new": 0}, {"new": 1}, {"new": 2}]
    everything = await pop_now(client.queue(q).group(g_all).subscription_mode("all").batch(10))
    assert len(everything) == 8


async def test_subscription_from_now_skips_the_backlog(client):
    q = unique("sub-now")
    g = unique("g")
    await push_payloads(client, q, [{"old": 1}])
    assert await pop_now(client.queue(q).group(g).subscription_from("now").batch(10)) == []
    await push_payloads(client, q, [{"new": 1}])
    assert [m["data"] for m in await pop_now(client.queue(q).group(g).batch(10))] == [{"new": 1}]


async def test_subscription_from_a_timestamp_starts_at_that_instant(client):
    q = unique("sub-ts")
    g = unique("g")
    await push_payloads(client, q, [{"before": 1}])
    await asyncio.sleep(1.1)
    since = iso_now()
    await asyncio.sleep(0.1)
    await push_payloads(client, q, [{"after": 1}, {"after": 2}])
    msgs = await pop_now(client.queue(q).group(g).subscription_from(since).batch(10))
    assert [m["data"] for m in msgs] == [{"after": 1}, {"after": 2}]


async def test_subscription_is_decided_on_first_contact_only(client):
    q = unique("sub-once")
    g = unique("g")
    await push_payloads(client, q, [{"old": 1}])
    assert await pop_now(client.queue(q).group(g).subscription_mode("new").batch(10)) == []
    # A later hint is ignored: the stored subscription wins.
    assert await pop_now(client.queue(q).group(g).subscription_mode("all").batch(10)) == []


async def test_a_partition_created_after_subscribing_delivers_its_backlog(client):
    q = unique("sub-late-part")
    g = unique("g")
    await push_payloads(client, q, [{"old": 1}], partition="early")
    assert await pop_now(client.queue(q).group(g).subscription_mode("new").batch(10)) == []
    await push_payloads(client, q, [{"late": 1}, {"late": 2}], partition="late")
    msgs = await pop_now(client.queue(q).group(g).batch(10))
    assert [m["data"] for m in msgs] == [{"late": 1}, {"late": 2}]


async def test_deleted_group_starts_fresh(client):
    q = unique("group-delete")
    g = unique("g")
    await push_payloads(client, q, [{"n": i} for i in range(3)])
    assert len(await pop_all(client, q, group=g)) == 3
    assert await pop_now(client.queue(q).group(g).batch(10)) == []
    res = await client.delete_consumer_group(g, True)
    assert res.get("success") is True, res
    again = await pop_now(client.queue(q).group(g).batch(10))
    assert [m["data"]["n"] for m in again] == [0, 1, 2]


async def test_group_acks_do_not_move_queue_mode(client):
    q = unique("group-ack")
    g = unique("g")
    await push_payloads(client, q, [{"n": 1}])
    (msg,) = await pop_now(client.queue(q).group(g).batch(1))
    assert (await client.ack(msg, True, {"group": g}))["success"]
    assert await pop_now(client.queue(q).group(g).batch(1)) == []
    assert [m["data"] for m in await pop_now(client.queue(q).batch(1))] == [{"n": 1}]


async def test_group_retry_budgets_are_independent(client):
    q = unique("group-retries")
    g1, g2 = unique("g1"), unique("g2")
    await client.queue(q).config({"retry_limit": 3}).create()
    await push_payloads(client, q, [{"i": i} for i in range(10)])
    attempts = 0

    async def flaky(msgs):
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise Exception("compat flaky handler")

    await client.queue(q).group(g1).batch(100).wait(False).limit(30).consume(flaky)
    assert attempts == 3
    assert len(await _consume_all(client, q, g2)) == 10


async def test_queue_mode_never_skips_the_backlog(client):
    q = unique("sub-queue-mode")
    await push_payloads(client, q, [{"old": i} for i in range(3)])
    # subscriptionMode only applies to named groups; queue mode always starts at the beginning.
    msgs = await pop_now(client.queue(q).subscription_mode("new").batch(10))
    assert [m["data"]["old"] for m in msgs] == [0, 1, 2]


async def test_targeted_pop_with_mode_new_skips_that_partitions_backlog(client):
    q = unique("sub-targeted")
    g = unique("g")
    await push_payloads(client, q, [{"old": 1}], partition="lane")
    assert await pop_now(client.queue(q).partition("lane").group(g).subscription_mode("new").batch(10)) == []
    await push_payloads(client, q, [{"new": 1}], partition="lane")
    msgs = await pop_now(client.queue(q).partition("lane").group(g).batch(10))
    assert [m["data"] for m in msgs] == [{"new": 1}]
