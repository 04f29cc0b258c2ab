"""The official client against a broker with JWT auth on (docs/wire.md §1), in the pass's wire
mode: its pushes (JSON, or QPB1 with client-built compressed frames), pops (JSON, or QPF1
frames) and transactions (JSON, or QTB1) are stamped with the token's `sub`, and the broker's
refusals (no token, a role too weak) reach the caller as errors naming the reason."""

import httpx
import pytest

from conftest import make_token
from support import (MODE, POP_FRAMED_CONTENT_TYPE, PUSH_BINARY_CONTENT_TYPE, make_client,
                     pop_now, push_payloads, unique)


async def test_pushes_and_pops_carry_the_producer(admin, producer, transport):
    q = unique("auth-push")
    await admin.queue(q).create()
    await push_payloads(producer, q, [{"n": i} for i in range(3)], prefix=q)
    msgs = await pop_now(producer.queue(q).batch(10))
    assert [m["data"] for m in msgs] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert [m["producerSub"] for m in msgs] == ["compat-producer"] * 3
    # Another reader sees the same attested identity.
    again = await pop_now(admin.queue(q).group("auditor").batch(10))
    assert {m["producerSub"] for m in again} == {"compat-producer"}
    (push,) = transport.matching("POST", "/api/v1/push")
    (pop,) = transport.matching("GET", f"/api/v1/pop/queue/{q}")
    if MODE == "binary":
        assert push.request_head == b"QPB1"
        assert push.request_content_type == PUSH_BINARY_CONTENT_TYPE
        assert pop.response_headers["content-type"] == POP_FRAMED_CONTENT_TYPE
    else:
        assert push.request_content_type.startswith("application/json")


async def test_transaction_pushes_carry_the_producer(admin, producer, transport):
    q = unique("auth-txn")
    await admin.queue(q).create()
    res = await producer.transaction().queue(q).push([{"data": {"t": 1}}]).commit()
    assert res["success"] is True
    (msg,) = await pop_now(producer.queue(q).batch(10))
    assert msg["producerSub"] == "compat-producer"
    (tx,) = transport.matching("POST", "/api/v1/transaction")
    if MODE == "binary":
        assert tx.request_head == b"QTB1"
    else:
        assert tx.request_content_type.startswith("application/json")


async def test_refusals_reach_the_caller():
    anonymous = make_client()
    reader = make_client(bearer_token=make_token("compat-reader", "read-only"))
    try:
        with pytest.raises(httpx.HTTPStatusError) as err:
            await anonymous.admin.list_queues()
        assert err.value.response.status_code == 401
        assert "missing bearer token" in err.value.response.json()["error"]
        with pytest.raises(httpx.HTTPStatusError) as err:
            await reader.queue(unique("auth-ro")).create()
        assert err.value.response.status_code == 403
        assert "needs the admin role" in err.value.response.json()["error"]
        listing = await reader.admin.list_queues()
        assert isinstance(listing, dict)
    finally:
        await anonymous.close()
        await reader.close()
