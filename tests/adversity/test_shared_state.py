"""Issue 25, second round: what tenants share, through a real gateway process in
front of a real redis-server (quotas and stored responses in it) and the fast
OpenAI upstream, with the official `openai` client.

* The response store is bounded per tenant: another tenant's many responses never
  push out mine, and a response over the share is refused with 413 before
  anything is generated (findings 2).
* A full Redis takes the store-down path: requests keep being answered (fail
  open), each with its access-log line, the gauge reads 0, a finished response
  that could not be stored is still delivered, and once memory is raised the
  tenant (one request at a time) is never refused for concurrency (finding 3, 9).
* A key limited to one model cannot read, list, delete or continue a response its
  tenant made on another model: 404 exactly as a missing id (finding 12).
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
import redis

from policies.auth import hash_key
from tests.procs import Process, openai_backend_config, scrape, start_gateway, start_redis, start_upstream

KEYS = {"acme": "sk-sy-acme-shared", "acme-vl": "sk-sy-acme-vl-only", "globex": "sk-sy-globex-shared"}
SHARE_BYTES = 256 << 10
SHARE_ENTRIES = 5
UP = "switchyard_quota_store_up"
# Redis answers again -> the probe (<= 0.5 s) sees it; ample room for a loaded machine.
RECOVERY_BOUND_S = 15.0


@pytest.fixture(scope="module")
def world(module_tmp):
    redis_proc = start_redis(module_tmp)
    upstream = start_upstream(module_tmp)
    models = {name: openai_backend_config(upstream, name)["models"][name] for name in ("tiny", "vl")}
    config = {
        "models": models,
        "auth": {
            "mode": "keys",
            "api_keys": [
                {"sha256": hash_key(KEYS["acme"]), "tenant": "acme"},
                {"sha256": hash_key(KEYS["acme-vl"]), "tenant": "acme", "models": ["vl"]},
                {"sha256": hash_key(KEYS["globex"]), "tenant": "globex"},
            ],
        },
        "tenants": {"acme": {"models": ["*"], "max_concurrent": 1}, "globex": {"models": ["*"]}},
        "quota_store": {
            "kind": "redis",
            "url": redis_proc.url,
            "on_unavailable": "fail_open",
            "timeout_s": 0.5,
            "lease_ttl_s": 120,
        },
        "response_store": {"tenant_max_entries": SHARE_ENTRIES, "tenant_max_bytes": SHARE_BYTES},
        "access_log": True,
    }
    gateway = start_gateway(module_tmp, config)
    yield gateway, redis_proc
    gateway.stop()
    upstream.stop()
    redis_proc.stop()


def client(gateway: Process, who: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEYS[who], max_retries=0, timeout=30)


def create(gateway: Process, who: str, model: str = "tiny", **body):
    return client(gateway, who).responses.create(model=model, input="hello", **body)


def test_another_tenant_s_responses_never_push_out_mine(world):
    gateway, redis_proc = world
    mine = create(gateway, "acme")
    for _ in range(SHARE_ENTRIES * 3):
        create(gateway, "globex")
    assert client(gateway, "acme").responses.retrieve(mine.id).id == mine.id
    with redis.Redis.from_url(redis_proc.url) as admin:  # what globex keeps in Redis: its share
        assert len(admin.keys("{switchyard:globex}:response:*")) == SHARE_ENTRIES
    follow = create(gateway, "acme", previous_response_id=mine.id)
    assert follow.status == "completed"


def answered(gateway) -> float:
    """Requests of model tiny answered 200, over every backend and track label."""
    return sum(
        value
        for series, value in scrape(gateway).items()
        if series.startswith("switchyard_requests_total{") and 'model="tiny"' in series and 'status="200"' in series
    )


def test_a_response_over_the_tenant_s_share_is_413_before_generation(world):
    gateway, _ = world
    before = answered(gateway)
    schema = {"type": "object", "description": "y" * (SHARE_BYTES + 1)}
    with pytest.raises(openai.APIStatusError) as caught:
        create(gateway, "globex", text={"format": {"type": "json_schema", "name": "s", "schema": schema}})
    assert caught.value.status_code == 413
    assert caught.value.body["code"] == "response_too_large"  # type: ignore[index]
    assert answered(gateway) == before


def not_found_body(gateway: Process, who: str, method: str, path: str) -> dict:
    r = httpx.request(method, gateway.url + path, headers={"authorization": f"Bearer {KEYS[who]}"}, timeout=30)
    assert r.status_code == 404, r.text
    return r.json()


def test_a_key_limited_to_a_model_cannot_reach_responses_made_on_another(world):
    gateway, _ = world
    made = create(gateway, "acme", model="tiny")
    missing = "resp_" + "0" * (len(made.id) - 5)
    for method, tail in (("GET", ""), ("GET", "/input_items"), ("DELETE", "")):
        refused = not_found_body(gateway, "acme-vl", method, f"/v1/responses/{made.id}{tail}")
        absent = not_found_body(gateway, "acme-vl", method, f"/v1/responses/{missing}{tail}")
        assert json.dumps(refused).replace(made.id, missing) == json.dumps(absent)
    with pytest.raises(openai.NotFoundError) as caught:
        create(gateway, "acme-vl", model="vl", previous_response_id=made.id)
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    # Its own model's responses it reaches; the other key still has the first.
    own = create(gateway, "acme-vl", model="vl")
    assert client(gateway, "acme-vl").responses.retrieve(own.id).id == own.id
    assert client(gateway, "acme").responses.retrieve(made.id).id == made.id


def access_log_lines(gateway: Process, request_id: str) -> int:
    return sum(
        1
        for line in gateway.child.log().splitlines()
        if line.startswith("{") and f'"request_id":"{request_id}"' in line
    )


def one_at_a_time(gateway: Process, count: int, tag: str) -> list[int]:
    """`count` chats of tenant acme, each after the last finished: their statuses."""
    statuses = []
    for i in range(count):
        r = httpx.post(
            gateway.url + "/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
            headers={"authorization": f"Bearer {KEYS['acme']}", "x-request-id": f"{tag}-{i}"},
            timeout=30,
        )
        statuses.append(r.status_code)
    return statuses


def test_a_full_redis_takes_the_store_down_path_and_keeps_no_lease(world):
    gateway, redis_proc = world
    admin = redis.Redis.from_url(redis_proc.url)
    try:
        assert one_at_a_time(gateway, 3, "before") == [200] * 3
        admin.set("filler", b"x" * (4 << 20))
        admin.config_set("maxmemory", "1mb")
        assert one_at_a_time(gateway, 10, "full") == [200] * 10  # fail_open, never 429
        assert scrape(gateway)[UP] == 0
        deadline = time.monotonic() + 10
        while access_log_lines(gateway, "full-9") == 0:  # each request answered and logged
            assert time.monotonic() < deadline, "no access-log line"
            time.sleep(0.1)
        assert all(access_log_lines(gateway, f"full-{i}") == 1 for i in range(10))
        assert "Exception in ASGI application" not in gateway.child.log()
        # A finished response Redis cannot keep is still delivered, completed.
        delivered = create(gateway, "globex")
        assert delivered.status == "completed"
        assert scrape(gateway).get('switchyard_responses_not_stored_total{reason="response_store_unavailable"}') == 1
        admin.config_set("maxmemory", "0")
        admin.delete("filler")
        deadline = time.monotonic() + RECOVERY_BOUND_S
        while scrape(gateway)[UP] != 1:
            assert time.monotonic() < deadline, "Redis not used again"
            time.sleep(0.1)
        assert one_at_a_time(gateway, 20, "after") == [200] * 20
        # the last answer's lease is given back just after its last byte: wait for it, briefly
        deadline = time.monotonic() + 5
        while (leases := admin.zcard("{switchyard:acme}:t:lease")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leases == 0, leases
    finally:
        admin.config_set("maxmemory", "0")
        admin.close()
