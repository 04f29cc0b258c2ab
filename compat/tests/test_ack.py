"""Ack semantics (docs/wire.md §8): cursor commit, nack clamp, retry without budget, below-cursor
honesty, unresolvable and foreign-lease refusals, lease-less acks."""

import asyncio

from support import pop_now, push_payloads, unique


async def _setup(client, n, lease_time=30, **config):
    q = unique("ack")
    await client.queue(q).config({"lease_time": lease_time, **config}).create()
    await push_payloads(client, q, [{"n": i} for i in range(1, n + 1)], prefix=q)
    msgs = await pop_now(client.queue(q).batch(n))
    assert len(msgs) == n
    return q, msgs


def _txns(msgs):
    return [m["transactionId"] for m in msgs]


async def test_single_ack_commits(client):
    q, (msg,) = await _setup(client, 1)
    res = await client.ack(msg)
    assert res["success"] is True
    assert res.get("noop") is not True
    assert not res.get("error")
    assert await pop_now(client.queue(q).batch(1)) == []


async def test_batch_ack_answers_one_result_per_message(client):
    q, msgs = await _setup(client, 3)
    res = await client.ack(msgs)
    assert res["success"] is True
    assert [r["transactionId"] for r in res["results"]] == _txns(msgs)
    assert all(r["success"] and not r.get("error") for r in res["results"])
    assert await pop_now(client.queue(q).batch(3)) == []


async def test_acking_a_later_message_completes_the_earlier_ones(client):
    q, msgs = await _setup(client, 5, lease_time=1)
    assert (await client.ack(msgs[2]))["success"]
    await asyncio.sleep(1.6)
    again = await pop_now(client.queue(q).batch(10))
    assert _txns(again) == _txns(msgs[3:]), "acking #3 must commit #1 and #2 too"


async def test_failed_in_one_call_clamps_the_cursor_before_it(client):
    q, msgs = await _setup(client, 5)
    for m in msgs:
        m["_status"] = "completed"
    msgs[1]["_status"] = "failed"
    msgs[1]["_error"] = "compat poison"
    await client.ack(msgs)
    again = await pop_now(client.queue(q).batch(10))
    assert _txns(again) == _txns(msgs[1:]), "a nack was skipped by later completed acks"


async def test_retry_clamps_without_charging_the_budget(client):
    # retry_limit 0: one explicit `failed` would dead-letter at once, a `retry` never does.
    q, msgs = await _setup(client, 2, retry_limit=0)
    for _ in range(3):
        res = await client.ack(msgs[0], "retry")
        assert res["success"] is True, res
        msgs = await pop_now(client.queue(q).batch(10))
        assert len(msgs) == 2
    dlq = await client.queue(q).dlq().get()
    assert dlq["messages"] == []


async def test_dlq_status_bypasses_the_budget(client):
    q, msgs = await _setup(client, 2, retry_limit=5)
    res = await client.ack(msgs[0], "dlq", {"error": "compat straight to dlq"})
    assert res["success"] is True and res.get("dlq") is True, res
    rest = await pop_now(client.queue(q).batch(10))
    assert _txns(rest) == _txns(msgs[1:])
    (row,) = (await client.queue(q).dlq().get())["messages"]
    assert row["transactionId"] == msgs[0]["transactionId"]
    assert "compat straight to dlq" in row["errorMessage"]


async def test_nack_below_the_cursor_is_refused_as_committed(client):
    q, msgs = await _setup(client, 3)
    assert (await client.ack(msgs[1]))["success"]
    late = await client.ack(msgs[0], False, {"error": "too late"})
    assert late["success"] is False
    assert "committed" in late["error"].lower(), late


async def test_completed_ack_below_the_cursor_is_a_noop(client):
    q, msgs = await _setup(client, 3)
    assert (await client.ack(msgs[1]))["success"]
    late = await client.ack(msgs[0])
    assert late["success"] is True and late.get("noop") is True, late
    fresh = await client.ack(msgs[2])
    assert fresh["success"] is True and fresh.get("noop") is not True, fresh


async def test_unresolvable_transaction_is_refused_and_keeps_the_lease(client):
    q, msgs = await _setup(client, 3)
    ghost = {"transactionId": f"{q}-never-pushed", "partitionId": msgs[0]["partitionId"],
             "leaseId": msgs[0]["leaseId"]}
    for status in (True, False):
        res = await client.ack(dict(ghost), status, {"error": "ghost"})
        assert res["success"] is False
        assert "unresolv" in res["error"].lower(), res
    assert (await client.ack(msgs))["success"], "the refused ghost acks burned the lease"


async def test_ack_under_a_foreign_lease_is_refused(client):
    q, msgs = await _setup(client, 2)
    forged = [{**m, "leaseId": "01a00000-0000-7000-8000-000000000000"} for m in msgs]
    res = await client.ack(forged)
    assert res["success"] is False
    assert "lease" in res["error"].lower()
    assert [r["success"] for r in res["results"]] == [False, False]
    assert (await client.ack(msgs))["success"]


async def test_ack_of_a_bad_partition_id_fails_that_item_only(client):
    q, msgs = await _setup(client, 1)
    bogus = {**msgs[0], "partitionId": "not-a-number"}
    res = await client.ack([bogus, msgs[0]])
    assert res["success"] is False
    assert [r["success"] for r in res["results"]] == [False, True]


async def test_lease_less_ack_commits_even_after_the_lease_expired(client):
    q, (msg,) = await _setup(client, 1, lease_time=1)
    await asyncio.sleep(1.6)
    without_lease = {k: v for k, v in msg.items() if k != "leaseId"}
    res = await client.ack(without_lease)
    assert res["success"] is True, res
    assert await pop_now(client.queue(q).batch(1)) == []


async def test_ack_with_an_expired_lease_is_refused_and_redelivers(client):
    q, (msg,) = await _setup(client, 1, lease_time=1)
    await asyncio.sleep(1.6)
    res = await client.ack(msg)
    assert res["success"] is False and "lease" in res["error"].lower(), res
    (again,) = await pop_now(client.queue(q).batch(1))
    assert again["transactionId"] == msg["transactionId"]
