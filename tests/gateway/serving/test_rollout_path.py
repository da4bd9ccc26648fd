"""A rollout's request path end to end: the official client, the gateway's whole HTTP
path, and a stable and a candidate simulator, each a process on loopback, told apart
by their answers' length. Sessions stick to one track at the candidate's share; each
request's `TrackRecord` reaches the rollout sink; a candidate with no serving backend
leaves its requests to stable, said in a header and counted."""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict

import openai
import pytest

from processes import free_port
from simulators.testing import start_simulator
from tests.gateway.live_gateway import serving
from tests.gateway.serving.rollout_kit import CANDIDATE_TOKENS, STABLE_TOKENS, Controller, rolled_out

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def sims():
    tools = {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}
    with start_simulator("vllm", output_tokens=STABLE_TOKENS, **tools) as stable:
        with start_simulator("vllm", output_tokens=CANDIDATE_TOKENS, seed=1, **tools) as candidate:
            yield stable, candidate


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)


def turn(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


async def test_a_quarter_of_the_sessions_are_the_candidates_and_none_flips(sims):
    stable, candidate = sims
    sessions, turns = 100, 2
    tracks: dict[str, set[int]] = defaultdict(set)
    limit = asyncio.Semaphore(8)
    async with serving(rolled_out(stable.url, candidate.url), rollouts=Controller(candidate=0.25)) as served:
        api = client(served.url)

        async def one(session: str, i: int) -> None:
            async with limit:
                answer = await api.chat.completions.create(
                    model="m", messages=turn(f"turn {i}"), extra_headers={"x-session-id": session}
                )
            tracks[session].add(answer.usage.completion_tokens)

        await asyncio.gather(*(one(f"session-{s}", i) for s in range(sessions) for i in range(turns)))
    # read once the server stopped: each request is counted by then (just after its answer)
    by_track = {t: served.metric("switchyard_requests_total", model="m", track=t) for t in ("stable", "candidate")}
    assert all(len(seen) == 1 for seen in tracks.values()), "a session flipped between the tracks"
    on_candidate = sum(seen == {CANDIDATE_TOKENS} for seen in tracks.values())
    sd = math.sqrt(sessions * 0.25 * 0.75)
    assert abs(on_candidate - sessions * 0.25) < 4 * sd, on_candidate
    assert by_track == {"candidate": on_candidate * turns, "stable": (sessions - on_candidate) * turns}


async def test_each_request_hands_the_sink_one_record_of_its_track(sims):
    stable, candidate = sims
    controller = Controller(candidate=0.5)
    async with serving(rolled_out(stable.url, candidate.url), rollouts=controller) as served:
        api = client(served.url)
        lengths = []
        for i in range(40):  # no session, no tenant stickiness: each request drawn on its own
            if i % 2:
                answer = await api.chat.completions.create(model="m", messages=turn(f"q{i}"))
                lengths.append(answer.usage.completion_tokens)
                continue
            stream = await api.chat.completions.create(
                model="m", messages=turn(f"q{i}"), stream=True, stream_options={"include_usage": True}
            )
            lengths += [chunk.usage.completion_tokens async for chunk in stream if chunk.usage is not None]
        await api.chat.completions.create(model="m", messages=turn("weather? [[sim:tool_call]]"), tools=TOOLS)
        schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        await api.chat.completions.create(
            model="m",
            messages=turn("a city"),
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        )
    # (A record is written when its request ends on the gateway, which may be just after
    # the next one began: they are compared as a whole, not in order.)
    records = [r for model, r in controller.records if model == "m"]
    assert len(records) == 42 and len(lengths) == 40
    plain = [r for r in records if r.tool_calls_valid is None and r.structured_valid is None]
    (tool_call,) = [r for r in records if r.tool_calls_valid is not None]
    (structured,) = [r for r in records if r.structured_valid is not None]
    assert tool_call.tool_calls_valid is True and tool_call.finish_reason == "tool_calls"
    assert structured.structured_valid is True and structured.tool_calls_valid is None
    assert len(plain) == 40 and {r.track for r in plain} == {"stable", "candidate"}
    length_of = {"candidate": CANDIDATE_TOKENS, "stable": STABLE_TOKENS}
    assert sorted(length_of[r.track] for r in plain) == sorted(lengths)  # the record names the track that answered
    for record in records:
        assert record.failure is None and record.ttft_s is not None and record.ttft_s > 0
        assert record.finish_reason in ("stop", "length", "tool_calls") and record.prompt_tokens
        assert record.itl_s is None or record.itl_s >= 0
    streamed = [r for r in plain if r.itl_s is not None]
    assert 0 < len(streamed) <= 20  # only streams have gaps to judge
    assert all(r.completion_tokens == length_of[r.track] for r in plain)


async def test_a_failing_candidate_is_recorded_as_failing_on_its_track(sims):
    stable, _ = sims
    with start_simulator("vllm", fault="status=500") as failing:
        controller = Controller(candidate=1.0)
        async with serving(rolled_out(stable.url, failing.url), rollouts=controller) as served:
            api = client(served.url)
            for i in range(5):
                with pytest.raises(openai.APIStatusError) as failed:
                    await api.chat.completions.create(model="m", messages=turn(f"q{i}"))
                assert failed.value.status_code >= 500
        stats = failing.stats()
    assert [(r.track, r.failure) for _, r in controller.records] == [("candidate", "server_error")] * 5
    assert stats["requests_total"] == 5  # failover stayed on the candidate track


async def test_a_candidate_with_no_serving_backend_leaves_its_requests_to_stable_and_says_so(sims):
    stable, _ = sims
    controller = Controller(candidate=1.0)
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: its health check fails
    async with serving(rolled_out(stable.url, nowhere), rollouts=controller) as served:
        api = client(served.url)
        for i in range(4):
            raw = await api.chat.completions.with_raw_response.create(model="m", messages=turn(f"q{i}"))
            assert raw.headers["x-switchyard-track-fallback"] == "candidate"
            assert raw.parse().usage.completion_tokens == STABLE_TOKENS
    assert served.metric("switchyard_rollout_fallbacks_total", model="m", track="candidate") == 4
    assert [r.track for _, r in controller.records] == ["stable"] * 4


async def test_a_model_without_rollout_gets_no_track_and_no_record(sims):
    stable, _ = sims
    controller = Controller(candidate=1.0, mirror=1.0)
    config = {"access_log": False, "models": {"m": {"backends": [{**_stable(stable.url)}]}}}
    async with serving(config, rollouts=controller) as served:
        raw = await client(served.url).chat.completions.with_raw_response.create(model="m", messages=turn("q"))
        assert "x-switchyard-track-fallback" not in raw.headers
    assert served.metric("switchyard_requests_total", model="m", track="") == 1
    assert controller.records == [] and controller.comparisons == []


def _stable(url: str) -> dict:
    return {"name": "stable", "adapter": "vllm", "url": url, "served_model": "sim-model"}
