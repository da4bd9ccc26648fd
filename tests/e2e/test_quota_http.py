"""The quota step as a client sees it, through a real gateway process in front of
the fast OpenAI upstream: a request that can never fit is a 400 the official
client does not retry; the reset headers are the limiter's; and a request sent
without max_tokens under a token limit generates no more than it reserved."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from policies.auth import hash_key
from tests.procs import openai_backend_config, start_gateway

KEY = "sk-sy-quota-http-key"
CAP = 20
OPENAI_DURATION = re.compile(r"^(\d+ms|\d+s|\d+m\d+s)$")


@pytest.fixture(scope="module")
def gw(module_tmp, upstream):
    cfg = openai_backend_config(upstream)
    cfg.update(
        {
            "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key(KEY), "tenant": "small"}]},
            "tenants": {"small": {"requests_per_minute": 1000, "tokens_per_minute": 3000, "max_tokens_cap": CAP}},
            "access_log": False,
        }
    )
    p = start_gateway(module_tmp, cfg)
    yield p
    p.stop()


def refused_400s(gw) -> float:
    text = httpx.get(gw.url + "/metrics").text
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("switchyard_requests_total{") and 'status="400"' in line
    )


def test_a_request_over_the_whole_tpm_is_a_400_the_sdk_does_not_retry(gw):
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=3)
    before = refused_400s(gw)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5000)
    err = exc.value
    assert err.code == "request_exceeds_tpm_limit" and err.param == "max_tokens"
    assert "limit is 3000" in err.message and "max_tokens to at most" in err.message
    assert "retry-after" not in err.response.headers
    assert refused_400s(gw) - before == 1  # sent once: no retries


def test_reset_headers_come_from_the_limiter(gw):
    r = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10},
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert r.status_code == 200
    for kind in ("requests", "tokens"):
        assert OPENAI_DURATION.match(r.headers[f"x-ratelimit-reset-{kind}"])
    assert r.headers["x-ratelimit-reset-requests"] == "0s"  # 1000 RPM: the next one fits now


def test_without_max_tokens_generation_stops_at_the_reserved_budget(gw, upstream):
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
    answer = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], extra_body={"sim": {"chunks": 500}}
    )
    assert answer.usage.completion_tokens == CAP and answer.choices[0].finish_reason == "length"
    assert httpx.get(upstream.url + "/_sim/stats").json()["last_body"]["max_tokens"] == CAP
