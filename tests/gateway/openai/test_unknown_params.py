"""A model's `unknown_params` (pass, the default, or reject) decides a field OpenAI's
API does not define, on chat, legacy completions and the Responses API alike
(gateway/openai/request_fields.py `refuse_unknown`, applied once after the model check),
through the whole HTTP path to a vLLM simulator."""

from __future__ import annotations

import httpx
import pytest

from simulators.testing import start_in_process
from tests.gateway.live_gateway import serving

MSG = [{"role": "user", "content": "hi"}]
BODIES = {
    "/v1/chat/completions": {"model": "M", "messages": MSG, "max_tokens": 2},
    "/v1/completions": {"model": "M", "prompt": "hi", "max_tokens": 2},
    "/v1/responses": {"model": "M", "input": "hi", "max_output_tokens": 16},
}
UNKNOWN = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def sim():
    with start_in_process("vllm", health_latency=0.0) as gen:
        yield gen


def config(sim, **model) -> dict:
    backend = {"name": "g", "adapter": "vllm", "url": sim.url, "served_model": "sim-model"}
    return {"access_log": False, "models": {"M": {"backends": [backend], **model}}}


def sent_upstream(sim) -> dict:
    return [r for r in sim.stats()["last_requests"] if r["path"].endswith("completions")][-1]["body"]


@pytest.mark.parametrize("path", list(BODIES))
async def test_by_default_an_unknown_field_passes_on_every_route(sim, path):
    async with serving(config(sim)) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        r = await client.post(path, json={**BODIES[path], **UNKNOWN})
        assert r.status_code == 200, r.text
    if path != "/v1/responses":  # chat and completions hand it to the runtime that reads it
        assert sent_upstream(sim)["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize("path", list(BODIES))
async def test_reject_refuses_an_unknown_field_on_every_route_by_name(sim, path):
    async with serving(config(sim, unknown_params="reject")) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            r = await client.post(path, json={**BODIES[path], **UNKNOWN})
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert (error["param"], error["code"]) == ("chat_template_kwargs", "unknown_parameter")
            assert error["message"] == "Unknown parameter: 'chat_template_kwargs'."
            # OpenAI's own fields the gateway does not read are not unknown; a known body passes
            known = {"prompt_cache_key": "k"} if path != "/v1/responses" else {"safety_identifier": "s"}
            ok = await client.post(path, json={**BODIES[path], **known})
            assert ok.status_code == 200, ok.text


async def test_the_model_check_comes_first(sim):
    # a model the caller cannot use is a 404 whatever the body: no policy leaks its existence
    async with serving(config(sim, unknown_params="reject")) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
            r = await client.post(
                "/v1/chat/completions", json={**BODIES["/v1/chat/completions"], "model": "x", **UNKNOWN}
            )
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
