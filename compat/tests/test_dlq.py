"""Retries ending in the dead-letter queue (docs/wire.md §8.4, §11), read back with the client's
dlq() builder (GET /api/v1/dlq)."""

from support import pop_now, push_payloads, unique


async def test_consume_loop_retries_then_dead_letters(client):
    q = unique("dlq-loop")
    await client.queue(q).config({"retry_limit": 2}).create()
    await push_payloads(client, q, [{"kind": "poison"}, {"kind": "good"}], prefix=q)
    calls = []

    async def handler(msg):
        calls.append(msg["data"]["kind"])
        if msg["data"]["kind"] == "poison":
            raise Exception("compat handler error - triggering DLQ")

    await client.queue(q).batch(2).wait(False).idle_millis(1500).each().consume(handler)
    # retry_limit 2: three deliveries, then the DLQ; the next message is handled once.
    assert calls.count("poison") == 3, calls
    assert calls.count("good") == 1, calls

    res = await client.queue(q).dlq().limit(10).get()
    (row,) = res["messages"]
    assert row["data"] == {"kind": "poison"}
    assert row["transactionId"] == f"{q}-0"
    assert "compat handler error" in row["errorMessage"]
    assert row["retryCount"] == 2
    assert row["partition"] == "Default"
    assert row["queue"] == q
    assert row["partitionId"].isdigit()
    assert res["total"] == 1
    assert await pop_now(client.queue(q).batch(10)) == []


async def test_retry_limit_zero_dead_letters_on_the_first_failure(client):
    q = unique("dlq-zero")
    await client.queue(q).config({"retry_limit": 0}).create()
    await push_payloads(client, q, [{"n": 1}])
    (msg,) = await pop_now(client.queue(q).batch(1))
    res = await client.ack(msg, False, {"error": "compat first failure"})
    assert res["success"] is True and res.get("dlq") is True, res
    assert await pop_now(client.queue(q).batch(1)) == []
    (row,) = (await client.queue(q).dlq().get())["messages"]
    assert row["errorMessage"] == "compat first failure"


async def test_on_error_callback_nacks_into_the_dlq(client):
    q = unique("dlq-on-error")
    await client.queue(q).config({"retry_limit": 1, "dlq_after_max_retries": True}).create()
    await push_payloads(client, q, [{"message": "doomed"}])
    attempts = 0

    async def handler(msg):
        nonlocal attempts
        attempts += 1
        raise Exception("Test error - on_error")

    async def on_error(msg, error):
        await client.ack(msg, False, {"error": str(error)})

    await client.queue(q).batch(1).wait(False).idle_millis(1500).each().consume(handler).on_error(on_error)
    assert attempts == 2
    (row,) = (await client.queue(q).dlq().limit(10).get())["messages"]
    assert row["data"]["message"] == "doomed"
    assert "Test error" in row["errorMessage"]


async def test_disabled_dlq_drops_the_message_after_its_retries(client):
    q = unique("dlq-off")
    await client.queue(q).config(
        {"retry_limit": 1, "dead_letter_queue": False, "dlq_after_max_retries": False}
    ).create()
    await push_payloads(client, q, [{"n": "drop me"}, {"n": "keep"}])
    for _ in range(2):
        msgs = await pop_now(client.queue(q).batch(1))
        assert [m["data"]["n"] for m in msgs] == ["drop me"]
        assert (await client.ack(msgs[0], False, {"error": "no"}))["success"]
    rest = await pop_now(client.queue(q).batch(10))
    assert [m["data"]["n"] for m in rest] == ["keep"]
    assert (await client.queue(q).dlq().get())["messages"] == []


async def test_dlq_is_per_group_and_filterable(client):
    q = unique("dlq-group")
    g = unique("g")
    await client.queue(q).config({"retry_limit": 0}).create()
    await push_payloads(client, q, [{"n": 1}])
    (gm,) = await pop_now(client.queue(q).group(g).batch(1))
    assert (await client.ack(gm, False, {"group": g, "error": "group failure"}))["dlq"] is True
    # Queue mode still has the message: a group's DLQ row is its own.
    assert [m["data"] for m in await pop_now(client.queue(q).batch(1))] == [{"n": 1}]
    mine = (await client.queue(q).dlq(g).get())["messages"]
    assert [r["consumerGroup"] for r in mine] == [g]
    assert (await client.queue(q).dlq("some-other-group").get())["messages"] == []


async def test_dlq_pages_newest_first(client):
    q = unique("dlq-pages")
    await client.queue(q).config({"retry_limit": 0}).create()
    await push_payloads(client, q, [{"n": i} for i in range(3)])
    for _ in range(3):
        (msg,) = await pop_now(client.queue(q).batch(1))
        assert (await client.ack(msg, False, {"error": f"fail {msg['data']['n']}"}))["dlq"] is True
    page1 = await client.queue(q).dlq().limit(2).get()
    page2 = await client.queue(q).dlq().limit(2).offset(2).get()
    assert [r["data"]["n"] for r in page1["messages"]] == [2, 1]
    assert [r["data"]["n"] for r in page2["messages"]] == [0]
    assert page1["total"] == 3
