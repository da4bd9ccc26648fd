"""The Responses API's operations end to end. Where stored responses live: two gateway replicas on one real Redis
(the quota store's, `response_store.kind: auto`) continue each other's responses;
replicas with the memory store do not (404, as documented); the TTL expires a
response; store: false keeps nothing. And failover before the first byte, as for chat."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from processes import free_port
from tests.procs import openai_backend_config, start_gateway


def client(gateway) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key="unused", max_retries=0, _strict_response_validation=True
    )


def pair(tmp, upstream, **config):
    return [start_gateway(tmp, {**openai_backend_config(upstream), **config}) for _ in range(2)]


def test_replicas_on_one_redis_continue_each_others_responses(tmp_path, upstream, redis_server):
    first, second = pair(tmp_path, upstream, quota_store={"kind": "redis", "url": redis_server.url})
    try:
        made = client(first).responses.create(model="m", input="one", max_output_tokens=16)
        assert client(second).responses.retrieve(made.id).output_text == made.output_text
        more = client(second).responses.create(model="m", input="two", previous_response_id=made.id)
        assert [i.role for i in client(first).responses.input_items.list(more.id, order="asc").data] == [
            "user",
            "assistant",
            "user",
        ]
        client(first).responses.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            client(second).responses.retrieve(made.id)
    finally:
        for g in (first, second):
            g.stop()


def test_memory_stores_are_per_replica_and_expire(tmp_path, upstream):
    first, second = pair(tmp_path, upstream, response_store={"kind": "memory", "ttl_s": 10})
    try:
        made = client(first).responses.create(model="m", input="one", max_output_tokens=16)
        assert client(first).responses.retrieve(made.id).id == made.id
        with pytest.raises(openai.NotFoundError):
            client(second).responses.retrieve(made.id)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if httpx.get(f"{first.url}/v1/responses/{made.id}").status_code == 404:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the stored response outlived its ttl_s")
    finally:
        for g in (first, second):
            g.stop()


def test_a_stored_response_is_not_kept_when_store_is_false(gateway):
    made = client(gateway).responses.create(model="m", input="one", max_output_tokens=16, store=False)
    assert made.store is False
    with pytest.raises(openai.NotFoundError):
        client(gateway).responses.retrieve(made.id)


def test_failover_before_the_first_byte_serves_responses_too(tmp_path, upstream):
    """The Responses route is the chat path: a dead backend is skipped, a fallback model
    serves, and a model with nothing alive answers an error envelope, not a broken stream."""
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    live = {"name": "live", "adapter": "openai", "url": upstream.url + "/v1", "served_model": "m"}
    config = {
        "models": {
            "m": {"routing": "round_robin", "backends": [{"name": "dead", "adapter": "openai", "url": dead}, live]},
            "only-dead": {
                "fallback": ["m"],
                "max_retries": 0,
                "backends": [{"name": "dead2", "adapter": "openai", "url": dead}],
            },
            "all-dead": {"max_retries": 0, "backends": [{"name": "dead3", "adapter": "openai", "url": dead}]},
        }
    }
    gw = start_gateway(tmp_path, config)
    try:
        c = client(gw)
        for _ in range(4):  # round robin would pick the dead one half of the time
            assert c.responses.create(model="m", input="hi", max_output_tokens=16).status == "completed"
        with c.responses.stream(model="only-dead", input="hi", max_output_tokens=16) as stream:
            assert stream.get_final_response().model == "only-dead"
        r = httpx.post(gw.url + "/v1/responses", json={"model": "all-dead", "input": "hi", "stream": True})
        assert r.status_code in (502, 503) and r.headers["content-type"].startswith("application/json")
        assert "127.0.0.1" not in r.text  # an error never names a backend
    finally:
        gw.stop()
