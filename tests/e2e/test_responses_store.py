"""Where stored responses live, end to end: two gateway replicas on one real Redis
(the quota store's, `response_store.kind: auto`) continue each other's responses;
replicas with the memory store do not (404, as documented); the TTL expires a
response; a reload may not change the store."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

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
    first, second = pair(tmp_path, upstream, response_store={"kind": "memory", "ttl_s": 1})
    try:
        made = client(first).responses.create(model="m", input="one", max_output_tokens=16)
        assert client(first).responses.retrieve(made.id).id == made.id
        with pytest.raises(openai.NotFoundError):
            client(second).responses.retrieve(made.id)
        deadline = time.monotonic() + 30
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
