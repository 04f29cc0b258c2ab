"""The client's admin surface for the routes its core flows call (docs/wire.md §12-§15):
queue listing and depth, consumer groups (list, detail, seek, delete), message detail."""

import asyncio

import httpx
import pytest

from support import iso_now, pop_all, pop_now, push_payloads, unique


async def test_queue_listing_counts_messages_and_partitions(client):
    q = unique("admin-list")
    await push_payloads(client, q, [{"n": i} for i in range(3)], partition="p1")
    await push_payloads(client, q, [{"n": i} for i in range(2)], partition="p2")
    listing = await client.admin.list_queues()
    queues = listing["queues"] if isinstance(listing, dict) else listing
    (mine,) = [e for e in queues if (e.get("name") or e.get("queue")) == q]
    assert mine["partitions"] == 2
    assert mine["messages"]["total"] == 5
    detail = await client.admin.get_queue(q)
    assert (detail.get("name") or detail.get("queue")) == q


async def test_unknown_queue_detail_is_404(client):
    with pytest.raises(httpx.HTTPStatusError) as err:
        await client.admin.get_queue(unique("admin-missing"))
    assert err.value.response.status_code == 404


async def test_depth_follows_consumption(client):
    q = unique("admin-depth")
    await push_payloads(client, q, [{"n": i} for i in range(4)], partition="a")
    await push_payloads(client, q, [{"n": 9}], partition="b")
    depth = await client.admin.get_queue_depth(q)
    assert depth["pending"] == 5
    assert sorted((p["partition"], p["pending"]) for p in depth["partitions"]) == [("a", 4), ("b", 1)]
    await pop_all(client, q)
    assert (await client.admin.get_queue_depth(q))["pending"] == 0


async def test_consumer_group_listing_and_detail(client):
    q = unique("admin-groups")
    g = unique("g")
    await push_payloads(client, q, [{"n": i} for i in range(3)])
    assert len(await pop_all(client, q, group=g)) == 3
    groups = await client.admin.list_consumer_groups()
    names = [x.get("name") or x.get("consumerGroup") for x in groups] if isinstance(groups, list) else list(groups)
    assert g in names, groups
    detail = await client.admin.get_consumer_group(g)
    assert q in detail, detail
    assert [p["partition"] for p in detail[q]["partitions"]] == ["Default"]


async def test_seek_to_end_skips_the_backlog_and_releases_the_lease(client):
    q = unique("admin-seek-end")
    g = unique("g")
    await push_payloads(client, q, [{"n": i} for i in range(3)])
    assert len(await pop_now(client.queue(q).group(g).batch(1))) == 1  # leased, never acked
    res = await client.admin.seek_consumer_group(g, q, {"toEnd": True})
    assert res["success"] is True and res["partitionsUpdated"] == 1, res
    assert await pop_now(client.queue(q).group(g).batch(10)) == []
    await push_payloads(client, q, [{"n": "after"}])
    assert [m["data"]["n"] for m in await pop_now(client.queue(q).group(g).batch(10))] == ["after"]


async def test_seek_back_to_a_timestamp_replays(client):
    q = unique("admin-seek-ts")
    g = unique("g")
    await push_payloads(client, q, [{"n": "first"}])
    await asyncio.sleep(1.1)
    since = iso_now()
    await asyncio.sleep(0.1)
    await push_payloads(client, q, [{"n": "second"}, {"n": "third"}])
    assert len(await pop_all(client, q, group=g)) == 3
    res = await client.admin.seek_consumer_group(g, q, {"timestamp": since})
    assert res["success"] is True, res
    replay = await pop_now(client.queue(q).group(g).batch(10))
    assert [m["data"]["n"] for m in replay] == ["second", "third"]


async def test_seek_without_a_target_is_refused(client):
    q = unique("admin-seek-none")
    await push_payloads(client, q, [{"n": 1}])
    with pytest.raises(httpx.HTTPStatusError) as err:
        await client.admin.seek_consumer_group(unique("g"), q)
    assert err.value.response.status_code == 400


async def test_deleting_a_group_for_one_queue_resets_only_that_queue(client):
    q1, q2 = unique("admin-delq-1"), unique("admin-delq-2")
    g = unique("g")
    for q in (q1, q2):
        await push_payloads(client, q, [{"q": q}])
        assert len(await pop_all(client, q, group=g)) == 1
    res = await client.admin.delete_consumer_group_for_queue(g, q1)
    assert res["success"] is True, res
    assert [m["data"]["q"] for m in await pop_now(client.queue(q1).group(g).batch(10))] == [q1]
    assert await pop_now(client.queue(q2).group(g).batch(10)) == []


async def test_update_subscription_timestamp(client):
    g = unique("g")
    q = unique("admin-sub")
    await push_payloads(client, q, [{"n": 1}])
    await pop_now(client.queue(q).group(g).batch(1))
    res = await client.update_consumer_group_timestamp(g, iso_now())
    assert res.get("success") is True, res


async def test_message_detail_follows_the_message(client):
    q = unique("admin-msg")
    await client.queue(q).config({"retry_limit": 0}).create()
    await push_payloads(client, q, [{"n": 1}, {"n": 2}], prefix="m")
    first, second = await pop_now(client.queue(q).batch(2))
    pid = first["partitionId"]
    detail = await client.admin.get_message(pid, "m-0")
    assert detail["status"] == "processing"
    assert detail["data"] == {"n": 1} and detail["id"] == first["id"]
    assert detail["queue"] == q and detail["partition"] == "Default"
    assert (await client.ack(first))["success"]
    assert (await client.admin.get_message(pid, "m-0"))["status"] == "completed"
    assert (await client.ack(second, False, {"error": "detail test"}))["dlq"] is True
    dead = await client.admin.get_message(pid, "m-1")
    assert dead["status"] == "dead_letter"
    with pytest.raises(httpx.HTTPStatusError) as err:
        await client.admin.get_message(pid, "m-never")
    assert err.value.response.status_code == 404


async def test_health_reports_healthy(client):
    health = await client.admin.health()
    assert health["status"] == "healthy"
    assert health["database"] == "connected"
