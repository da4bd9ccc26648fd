"""The mirror of a rollout end to end (gateway/serving/mirror.py): copies of stable
requests reach the candidate and are compared, the client reads only stable's answer,
the tenant is charged once (a real Redis quota), and a candidate that hangs or fails
changes nothing for the client; copies past `max_inflight` are dropped and counted, and
a drain cancels those under way."""

from __future__ import annotations

import asyncio
import statistics
import time

import openai
import pytest
import redis as redis_py

from simulators.testing import start_simulator
from tests.gateway.live_gateway import serving
from tests.gateway.serving.rollout_kit import STABLE_TOKENS, Controller, rolled_out
from tests.procs import keys_auth_config

QUESTION = [{"role": "user", "content": "what is mirrored?"}]


@pytest.fixture(scope="module")
def stable():
    with start_simulator("vllm", output_tokens=STABLE_TOKENS) as sim:
        yield sim


def client(url: str, key: str = "x") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def charged(redis_url: str) -> tuple[int, int]:
    """(requests, tokens) the quota store holds in its windows, over every tenant."""
    r = redis_py.Redis.from_url(redis_url)
    try:
        counts = []
        for suffix in ("rpm", "tpm"):
            counts.append(sum(int(v) for key in r.scan_iter(f"*:{suffix}") for v in r.hvals(key)))
        return counts[0], counts[1]
    finally:
        r.close()


async def test_copies_reach_the_candidate_are_compared_and_charged_to_no_one(stable, redis_server):
    requests = 12
    with start_simulator("vllm", output_tokens=STABLE_TOKENS) as candidate:
        config = rolled_out(stable.url, candidate.url, mirror={"share": 1.0, "max_inflight": 64})
        config |= {
            "auth": keys_auth_config({"sk-acme": "acme"}),
            "tenants": {"acme": {"requests_per_minute": 1000, "tokens_per_minute": 1_000_000}},
            "quota_store": {"kind": "redis", "url": redis_server.url},
        }
        controller = Controller(candidate=0.0, mirror=1.0)
        async with serving(config, rollouts=controller) as served:
            api = client(served.url, "sk-acme")
            seen_tokens = 0
            for i in range(requests):
                if i % 2:
                    answer = await api.chat.completions.create(model="m", messages=QUESTION)
                    seen_tokens += answer.usage.total_tokens
                else:
                    stream = await api.chat.completions.create(
                        model="m", messages=QUESTION, stream=True, stream_options={"include_usage": True}
                    )
                    async for chunk in stream:
                        if chunk.usage is not None:
                            seen_tokens += chunk.usage.total_tokens
            comparisons = await controller.compared(requests)
        compared = served.metric("switchyard_rollout_mirror_copies_total", model="m", result="compared")
        assert candidate.stats()["requests_total"] == requests
    assert stable.stats()["requests_total"] >= requests
    assert all(c.alike for c in comparisons), [c.differences for c in comparisons]
    assert compared == requests
    # Only the client's own requests and tokens are charged, once each.
    assert charged(redis_server.url) == (requests, seen_tokens)
    assert [r.track for _, r in controller.records] == ["stable"] * requests


async def test_a_candidate_that_differs_is_reported_with_what_differed(stable):
    # A candidate that counts the prompt differently and stops at another length.
    with start_simulator("vllm", output_tokens=1, fault="prompt_tokens=999") as odd:
        controller = Controller(mirror=1.0)
        config = rolled_out(stable.url, odd.url, mirror={"share": 1.0})
        async with serving(config, rollouts=controller) as served:
            answer = await client(served.url).chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
            assert answer.usage.completion_tokens == 2  # stable's answer, cut by max_tokens
            (comparison,) = await controller.compared(1)
    assert not comparison.alike
    assert "finish_reason: length != stop" in comparison.differences
    assert any(d.startswith("usage: prompt_tokens 999 != ") for d in comparison.differences)


async def test_a_hanging_candidate_slows_no_client_and_its_copies_are_bounded_then_drained(stable):
    requests, bound = 16, 2
    with start_simulator("vllm", ttft_ms=120_000) as hanging:
        controller = Controller(mirror=0.0)
        config = rolled_out(stable.url, hanging.url, mirror={"share": 1.0, "max_inflight": bound})
        async with serving(config, rollouts=controller) as served:
            api = client(served.url)

            async def timed() -> float:
                t = time.perf_counter()
                answer = await api.chat.completions.create(model="m", messages=QUESTION)
                assert answer.usage.completion_tokens == STABLE_TOKENS
                return time.perf_counter() - t

            without = [await timed() for _ in range(requests)]
            controller.now = type(controller.now)(0.0, 1.0)  # the mirror on: every request copied
            with_mirror = [await timed() for _ in range(requests)]
            dropped = served.metric("switchyard_rollout_mirror_copies_total", model="m", result="dropped")
            async with asyncio.timeout(30):  # the copies under way reach the candidate
                while hanging.stats()["in_flight"] < bound:
                    await asyncio.sleep(0.02)
            held = hanging.stats()["max_in_flight"]  # never more than the bound at once
            served.gateway.draining = True  # a drain cancels the copies under way
            async with asyncio.timeout(30):
                while hanging.stats()["in_flight"]:
                    await asyncio.sleep(0.05)
            cancelled = served.metric("switchyard_rollout_mirror_copies_total", model="m", result="cancelled")
    # A coupled mirror would hold each answer for the candidate's 120 s.
    assert max(with_mirror) < 30
    assert statistics.median(with_mirror) < 5 * statistics.median(without) + 0.5, (without, with_mirror)
    assert held == bound and dropped == requests - bound and cancelled == bound
    assert controller.comparisons == []


async def test_a_failing_candidate_fails_no_client_and_each_failure_is_compared(stable):
    with start_simulator("vllm", fault="status=500") as failing:
        controller = Controller(mirror=1.0)
        config = rolled_out(stable.url, failing.url, mirror={"share": 1.0})
        async with serving(config, rollouts=controller) as served:
            api = client(served.url)
            for _ in range(6):
                answer = await api.chat.completions.create(model="m", messages=QUESTION)
                assert answer.usage.completion_tokens == STABLE_TOKENS
            comparisons = await controller.compared(6)
    assert {(c.stable_failure, c.candidate_failure) for c in comparisons} == {(None, "server_error")}
    assert not any(c.alike for c in comparisons)
    assert [r.failure for _, r in controller.records] == [None] * 6
