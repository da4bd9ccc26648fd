"""Stored-response reads are requests (issue 25, finding 11): GET, input_items and
DELETE are counted against the tenant's requests per minute, hold a unit of its
concurrency while they run, and pay for the bytes they send as tokens; a tenant
hammering reads of a large record is refused (429) while another tenant's reads
and chats go on."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.config.schema import parse_config
from gateway.protection.gate import Protection, stored_read_usage
from policies.auth import Principal
from tests.procs import eventually, keys_auth_config, openai_backend_config, start_gateway

HAMMER, CALM, BULK = "sk-sy-hammer", "sk-sy-calm", "sk-sy-bulk"
READS_PER_MINUTE = 12
BIG = "lorem ipsum " * 2_000  # 24 KB of input, stored with the response


@pytest.fixture(scope="module")
def gw(module_tmp, upstream):
    config = openai_backend_config(upstream)
    config["auth"] = keys_auth_config({HAMMER: "hammer", CALM: "calm", BULK: "bulk"})
    config["tenants"] = {
        "hammer": {"requests_per_minute": READS_PER_MINUTE},
        "calm": {"requests_per_minute": 1000},
        "bulk": {"tokens_per_minute": 10_000},
    }
    p = start_gateway(module_tmp, config)
    yield p
    p.stop()


def store(gw, key: str, text: str = "hi") -> str:
    answer = httpx.post(
        gw.url + "/v1/responses",
        json={"model": "m", "input": text, "max_output_tokens": 16, "store": True},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def read(gw, key: str, response_id: str, what: str = "") -> httpx.Response:
    return httpx.get(
        f"{gw.url}/v1/responses/{response_id}{what}", headers={"authorization": f"Bearer {key}"}, timeout=30
    )


def test_a_tenant_hammering_reads_is_refused_and_another_is_not(gw):
    mine, theirs = store(gw, HAMMER, BIG), store(gw, CALM, BIG)
    statuses = []
    for i in range(READS_PER_MINUTE + 8):
        statuses.append(read(gw, HAMMER, mine, "/input_items" if i % 2 else "").status_code)
        assert read(gw, CALM, theirs).status_code == 200  # the other tenant is served throughout
    assert set(statuses) == {200, 429}
    assert statuses.count(200) == READS_PER_MINUTE - 1  # the store call was one of its requests
    refused = read(gw, HAMMER, mine)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert "retry-after" in refused.headers
    logged = httpx.get(
        f"{gw.url}/v1/responses/{mine}",
        headers={"authorization": f"Bearer {HAMMER}", "x-request-id": "hammer-refused"},
        timeout=10,
    )
    assert logged.status_code == 429
    line = eventually(lambda: next((x for x in gw.log().splitlines() if '"hammer-refused"' in x), ""), timeout_s=10)
    assert json.loads(line)["status"] == 429 and json.loads(line)["tenant"] == "hammer"
    deleted = httpx.delete(f"{gw.url}/v1/responses/{mine}", headers={"authorization": f"Bearer {HAMMER}"}, timeout=10)
    assert deleted.status_code == 429  # a delete is a request too: refused, and the record stays
    assert read(gw, CALM, theirs).status_code == 200


def test_the_bytes_read_are_charged_as_tokens(gw):
    """24 KB per read is about 6,000 tokens: a 10,000 tokens-per-minute tenant gets
    its stored record back once or twice, not hundreds of times."""
    response_id = store(gw, BULK, BIG)
    statuses = [read(gw, BULK, response_id, "/input_items").status_code for _ in range(6)]
    assert statuses[0] == 200 and statuses[-1] == 429
    assert statuses.count(200) <= 2
    refused = read(gw, BULK, response_id)
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"


async def test_a_read_holds_a_unit_of_the_tenants_concurrency():
    config = parse_config(
        {
            "auth": keys_auth_config({"sk-x": "acme"}),
            "tenants": {"acme": {"max_concurrent": 1}},
            "models": {"m": {"backends": [{"name": "a", "adapter": "openai", "url": "http://127.0.0.1:9/v1"}]}},
        }
    )
    protection = Protection(config, CollectorRegistry())
    await protection.start()
    acme = Principal(tenant="acme", key_id=None, models=["*"], tier=1)
    try:
        held = await protection.admit_read(acme)
        with pytest.raises(Exception) as refused:
            await protection.admit_read(acme)
        assert getattr(refused.value, "code", None) == "concurrency_limit_exceeded"
        await held.release(stored_read_usage(100))
        again = await asyncio.wait_for(protection.admit_read(acme), 5)
        await again.release(stored_read_usage(0))
        assert protection.snapshot()["live_tickets"] == 0
    finally:
        await protection.aclose()
