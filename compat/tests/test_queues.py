"""Configure and delete (docs/wire.md §3, §4) through the client's queue builder."""

import httpx
import pytest

from support import pop_now, push_payloads, unique


async def test_create_answers_configured_and_echoes_every_option(client):
    q = unique("cfg")
    res = await client.queue(q).config(
        {"lease_time": 45, "retry_limit": 5, "priority": 7, "max_size": 1000,
         "dead_letter_queue": False, "delayed_processing": 0}
    ).create()
    assert res["configured"] is True
    assert res["queue"] == q
    assert res["queueId"].isdigit(), f"queueId must be a decimal string: {res['queueId']!r}"
    opts = res["options"]
    assert opts["leaseTime"] == 45
    assert opts["retryLimit"] == 5
    assert opts["priority"] == 7
    assert opts["maxSize"] == 1000
    assert opts["deadLetterQueue"] is False
    # Options the client did not send come back with the broker's defaults.
    assert opts["retryDelay"] == 0  # ours: 0 (off), docs/wire.md §3.2
    assert opts["dlqAfterMaxRetries"] is True
    assert opts["dedupWindowSeconds"] == 3600
    assert "error" not in res or not res["error"]


async def test_create_without_config_sends_client_defaults(client):
    q = unique("cfg-default")
    res = await client.queue(q).create()
    assert res["configured"] is True
    # QUEUE_DEFAULTS of the client: lease_time 300, retry_limit 3.
    assert res["options"]["leaseTime"] == 300
    assert res["options"]["retryLimit"] == 3


async def test_reconfigure_keeps_options_the_update_does_not_name(client, http):
    q = unique("cfg-merge")
    await client.queue(q).config({"lease_time": 45, "priority": 3}).create()
    # The client always re-sends all nine defaults, so a partial update needs raw HTTP.
    r = await http.post("/api/v1/configure", json={"queue": q, "options": {"retryLimit": 9}})
    assert r.status_code == 200, r.text
    opts = r.json()["options"]
    assert opts["retryLimit"] == 9
    assert opts["leaseTime"] == 45, "an update must merge, not reset absent options"
    assert opts["priority"] == 3


async def test_namespace_and_task_are_stored(client):
    q = unique("cfg-labels")
    res = await client.queue(q).namespace("compat-ns").task("compat-task").create()
    assert res["configured"] is True
    assert res["namespace"] == "compat-ns"
    assert res["task"] == "compat-task"


async def test_invalid_option_is_refused_with_400(client):
    q = unique("cfg-invalid")
    with pytest.raises(httpx.HTTPStatusError) as err:
        await client.queue(q).config({"lease_time": "forever"}).create()
    assert err.value.response.status_code == 400
    assert err.value.response.json().get("invalid") == "leaseTime"


async def test_delete_answers_deleted_and_drops_the_messages(client):
    q = unique("del")
    await client.queue(q).create()
    await push_payloads(client, q, [{"n": 1}, {"n": 2}])
    res = await client.queue(q).delete()
    assert res["deleted"] is True
    assert await pop_now(client.queue(q).batch(10)) == []


async def test_delete_of_an_unknown_queue_is_404(client):
    with pytest.raises(httpx.HTTPStatusError) as err:
        await client.queue(unique("del-unknown")).delete()
    assert err.value.response.status_code == 404
    assert "not found" in str(err.value).lower()


async def test_a_deleted_queue_can_be_recreated_empty(client):
    q = unique("del-recreate")
    await client.queue(q).create()
    await push_payloads(client, q, [{"v": "old"}], prefix="same")
    assert (await client.queue(q).delete())["deleted"] is True
    await client.queue(q).create()
    # The same transactionId is no duplicate any more: the hash sidecar went with the queue.
    res = await push_payloads(client, q, [{"v": "new"}], prefix="same")
    assert res[0]["status"] == "queued"
    msgs = await pop_now(client.queue(q).batch(10))
    assert [m["data"] for m in msgs] == [{"v": "new"}]


async def test_push_creates_a_queue_implicitly(client):
    q = unique("implicit")
    await push_payloads(client, q, [{"hello": "world"}])
    msgs = await pop_now(client.queue(q).batch(10))
    assert [m["data"] for m in msgs] == [{"hello": "world"}]
