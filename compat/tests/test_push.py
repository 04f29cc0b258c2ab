"""Push (docs/wire.md §5, and §6 in binary mode): single, batch, buffered, dedup, big and odd
payloads, all observed through pops."""

import uuid

from support import MODE, PUSH_BINARY_CONTENT_TYPE, pop_now, push_payloads, unique


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
        return True
    except (TypeError, ValueError):
        return False


async def test_single_push_is_queued_with_ids(client):
    q = unique("push-one")
    res = await client.queue(q).push([{"data": {"n": 1}, "transactionId": "tx-one"}])
    assert len(res) == 1
    r = res[0]
    assert r["status"] == "queued"
    assert (r.get("transaction_id") or r.get("transactionId")) == "tx-one"
    assert _is_uuid(r["message_id"]), r
    assert uuid.UUID(r["message_id"]).version == 7

    (msg,) = await pop_now(client.queue(q).batch(10))
    assert msg["id"] == r["message_id"]
    assert msg["transactionId"] == "tx-one"
    assert msg["data"] == {"n": 1}


async def test_batch_push_answers_in_input_order(client):
    q = unique("push-batch")
    payloads = [{"i": i} for i in range(50)]
    res = await push_payloads(client, q, payloads, prefix="b")
    assert [r.get("index", i) for i, r in enumerate(res)] == list(range(50))
    assert [(r.get("transaction_id") or r.get("transactionId")) for r in res] == [f"b-{i}" for i in range(50)]
    assert len({r["message_id"] for r in res}) == 50

    msgs = await pop_now(client.queue(q).batch(100))
    assert [m["data"] for m in msgs] == payloads
    assert [m["id"] for m in msgs] == [r["message_id"] for r in res]


async def test_client_minted_transaction_ids_are_echoed(client):
    q = unique("push-minted")
    res = await client.queue(q).push([{"data": {"a": 1}}, {"data": {"a": 2}}])
    txns = [r.get("transaction_id") or r.get("transactionId") for r in res]
    assert all(txns) and len(set(txns)) == 2
    msgs = await pop_now(client.queue(q).batch(10))
    assert [m["transactionId"] for m in msgs] == txns


async def test_buffered_push_delivers_everything_in_order(client):
    q = unique("push-buffered")
    for i in range(25):
        out = await client.queue(q).buffer({"message_count": 10, "time_millis": 200}).push([{"data": {"i": i}}])
        assert out == {"buffered": True, "count": 1}
    await client.flush_all_buffers()
    assert client.get_buffer_stats()["totalBufferedMessages"] == 0
    msgs = await pop_now(client.queue(q).batch(100))
    assert [m["data"]["i"] for m in msgs] == list(range(25))


async def test_duplicate_returns_the_original_message_id(client):
    q = unique("push-dup")
    first = await client.queue(q).push([{"data": {"v": 1}, "transactionId": "order-1-paid"}])
    again = await client.queue(q).push([{"data": {"v": 2}, "transactionId": "order-1-paid"}])
    assert first[0]["status"] == "queued"
    assert again[0]["status"] == "duplicate"
    assert again[0]["message_id"] == first[0]["message_id"]
    msgs = await pop_now(client.queue(q).batch(10))
    assert [m["data"] for m in msgs] == [{"v": 1}], "a duplicate must store nothing"


async def test_duplicate_inside_one_request(client):
    q = unique("push-dup-same")
    res = await client.queue(q).push(
        [{"data": {"v": 1}, "transactionId": "t"}, {"data": {"v": 2}, "transactionId": "t"},
         {"data": {"v": 3}, "transactionId": "u"}]
    )
    assert [r["status"] for r in res] == ["queued", "duplicate", "queued"]
    assert res[1]["message_id"] == res[0]["message_id"]
    msgs = await pop_now(client.queue(q).batch(10))
    assert [m["data"]["v"] for m in msgs] == [1, 3]


async def test_duplicate_callback_fires(client):
    q = unique("push-dup-cb")
    await client.queue(q).push([{"data": {}, "transactionId": "x"}])
    seen = []

    async def on_duplicate(items, error):
        seen.extend(items)

    await client.queue(q).push([{"data": {}, "transactionId": "x"}]).on_duplicate(on_duplicate)
    assert [i["transactionId"] for i in seen] == ["x"]


async def test_same_transaction_id_on_another_partition_is_queued(client):
    q = unique("push-dup-part")
    a = await client.queue(q).partition("a").push([{"data": {"p": "a"}, "transactionId": "shared"}])
    b = await client.queue(q).partition("b").push([{"data": {"p": "b"}, "transactionId": "shared"}])
    assert a[0]["status"] == "queued"
    assert b[0]["status"] == "queued"
    assert a[0]["message_id"] != b[0]["message_id"]
    got_a = await pop_now(client.queue(q).partition("a").batch(10))
    got_b = await pop_now(client.queue(q).partition("b").batch(10))
    assert [m["data"] for m in got_a] == [{"p": "a"}]
    assert [m["data"] for m in got_b] == [{"p": "b"}]
    assert got_a[0]["partitionId"] != got_b[0]["partitionId"]


async def test_one_megabyte_payload_round_trips(client):
    q = unique("push-1mb")
    blob = {"blob": "x" * (1024 * 1024), "tail": "end"}
    await push_payloads(client, q, [blob])
    (msg,) = await pop_now(client.queue(q).batch(1))
    assert msg["data"] == blob


async def test_null_and_empty_object_payloads(client):
    q = unique("push-null")
    await push_payloads(client, q, [None, {}])
    msgs = await pop_now(client.queue(q).batch(10))
    assert len(msgs) == 2
    assert msgs[0]["data"] is None
    assert msgs[1]["data"] == {}


async def test_payloads_of_every_json_type_are_stored_verbatim(client):
    q = unique("push-types")
    payloads = ["plain string", 42, -1.5, True, [1, "two", None, {"x": [3]}],
                {"unicode": "çà ünï 🚀 中文", "esc": "quote\" backslash\\ nl\n tab\t"},
                {"nested": {"deep": {"deeper": list(range(10))}}}, 0, ""]
    await push_payloads(client, q, payloads)
    msgs = await pop_now(client.queue(q).batch(100))
    assert [m["data"] for m in msgs] == payloads


async def test_trace_id_is_delivered(client):
    q = unique("push-trace")
    trace = str(uuid.uuid4())
    await client.queue(q).push([{"data": {"t": 1}, "traceId": trace}])
    (msg,) = await pop_now(client.queue(q).batch(1))
    assert msg["traceId"] == trace


async def test_push_answers_201_per_wire_form(client, transport):
    q = unique("push-wire")
    await push_payloads(client, q, [{"n": 1}, {"n": 2}])
    (ex,) = transport.matching("POST", "/api/v1/push")
    assert ex.status == 201
    if MODE == "binary":
        assert ex.request_content_type == PUSH_BINARY_CONTENT_TYPE
        assert ex.request_head == b"QPB1"
    else:
        assert ex.request_content_type.startswith("application/json")


async def test_encrypted_queue_round_trips_in_every_wire_form(client, transport):
    # compat/run.sh starts every broker with QUEEN_ENCRYPTION_KEY (docs/wire.md §3.2).
    q = unique("push-sealed")
    res = await client.queue(q).config({"encryption_enabled": True}).create()
    assert res["options"]["encryptionEnabled"] is True
    payloads = [{"secret": f"s-{i}"} for i in range(3)]
    res = await push_payloads(client, q, payloads, prefix="sealed")
    assert [r["status"] for r in res] == ["queued"] * 3
    msgs = await pop_now(client.queue(q).batch(10))
    assert [m["data"] for m in msgs] == payloads
    assert all("payloadError" not in m for m in msgs)
    (ex,) = transport.matching("GET", f"/api/v1/pop/queue/{q}")
    if MODE == "binary":
        # Sealed frames ship opened, as raw QPF1 records.
        assert ex.response_body[:4] == b"QPF1"
