"""adapters/vllm.py's dialect on its own (no server): the capabilities its options
declare and their defaults, the request id and structured-output fields of a body, and
the load read from vLLM's /metrics under its current and V0 names, the prefix hit
rate over the traffic since the previous read."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest, SamplingParams
from adapters.vllm import VLLMDialect, translate_guided


class Metrics:
    """A Reader whose /metrics answers `text` with `status` (None: unreachable)."""

    base_url = "http://vllm.invalid"

    def __init__(self, text: str = "", status: int | None = 200) -> None:
        self.text, self.status = text, status

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        assert path == "/metrics"
        if self.status is None:
            raise OSError("refused")
        return self.status, self.text.encode()


def metrics(**values: float) -> str:
    """One engine's samples, `vllm_x=...` written `vllm:x{engine="0"} ...`."""
    return "".join(f'vllm:{name.removeprefix("vllm_")}{{engine="0"}} {value}\n' for name, value in values.items())


def test_the_capabilities_and_their_defaults() -> None:
    d = VLLMDialect("b", "m")
    caps = d.capabilities
    assert (caps.tools, caps.cached_tokens, caps.explicit_abort, caps.embeddings, caps.tokenize) == (
        True,
        False,
        False,
        False,
        True,
    )
    assert d.backend == "b" and d.served_model == "m"
    flipped = VLLMDialect(
        "b",
        "m",
        {"tools": False, "prompt_tokens_details": True, "explicit_abort": True, "embeddings": True},
    ).capabilities
    assert (flipped.tools, flipped.cached_tokens, flipped.explicit_abort, flipped.embeddings) == (
        False,
        True,
        True,
        True,
    )


def chat(**extra) -> GenerationRequest:
    return GenerationRequest(
        request_id="gw-id-1",
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        sampling=SamplingParams(),
        extra=extra,
    )


def test_a_body_names_the_generation_after_the_gateway_s_id() -> None:
    assert VLLMDialect("b", "m").body(chat(), stream=False)["request_id"] == "gw-id-1"


def test_guided_fields_move_to_structured_outputs_unless_legacy_guided() -> None:
    moved = VLLMDialect("b", "m").body(chat(guided_regex="a+"), stream=False)
    assert moved.get("structured_outputs") == {"regex": "a+"} and "guided_regex" not in moved
    kept = VLLMDialect("b", "m", {"legacy_guided": True}).body(chat(guided_regex="a+"), stream=False)
    assert kept.get("guided_regex") == "a+" and "structured_outputs" not in kept


def test_structured_outputs_sent_as_such_win_over_guided_fields() -> None:
    body = {"guided_regex": "a+", "structured_outputs": {"json": {"type": "object"}}}
    translate_guided(body)
    assert body == {"structured_outputs": {"json": {"type": "object"}}}


async def test_load_reads_the_current_gauge_names() -> None:
    text = metrics(num_requests_running=3, num_requests_waiting=2, kv_cache_usage_perc=0.5)
    snap = await VLLMDialect("b").load(Metrics(text))
    assert (snap.running, snap.waiting, snap.kv_usage) == (3, 2, 0.5) and snap.read_at is not None


async def test_load_reads_v0_s_kv_and_hit_rate_gauges() -> None:
    text = metrics(num_requests_running=1, num_requests_waiting=0, gpu_cache_usage_perc=0.25)
    text += metrics(gpu_prefix_cache_hit_rate=0.75)
    snap = await VLLMDialect("b").load(Metrics(text))
    assert (snap.kv_usage, snap.prefix_hit_rate) == (0.25, 0.75)


async def test_an_unreachable_or_failing_endpoint_reads_as_no_load() -> None:
    # Either way a snapshot of now with nothing known (None would read as never read).
    gone = await VLLMDialect("b").load(Metrics(status=None))
    assert (gone.running, gone.waiting, gone.kv_usage) == (None, None, None) and gone.read_at is not None
    failing = await VLLMDialect("b").load(Metrics(status=500))
    assert failing.running is None and failing.read_at is not None


@pytest.mark.parametrize(("hits", "queries"), [("prefix_cache_hits_total", "prefix_cache_queries_total")])
async def test_the_prefix_hit_rate_follows_the_traffic_since_the_previous_read(hits, queries) -> None:
    d = VLLMDialect("b")

    async def rate(h: float, q: float) -> float | None:
        return (await d.load(Metrics(metrics(**{hits: h, queries: q})))).prefix_hit_rate

    assert await rate(0, 0) is None  # no query yet: no rate
    assert await rate(30, 100) == 0.3  # first with queries: the totals
    assert await rate(80, 200) == 0.5  # since the previous read: 50 of 100
    assert await rate(80, 200) == 0.4  # no new query: the totals
    assert await rate(90, 201) == 10.0 / 1  # one new query, ten new hits: as read
    assert await rate(90, 202) == 0.0  # hits unchanged (>=), one query more
    assert await rate(5, 10) == 0.5  # counters reset by a restart: the totals


async def test_the_prefix_counters_by_their_names_without_total() -> None:
    d = VLLMDialect("b")
    text = metrics(prefix_cache_hits=1, prefix_cache_queries=1)  # one query: a rate already
    assert (await d.load(Metrics(text))).prefix_hit_rate == 1.0


async def test_one_counter_without_the_other_falls_back_to_the_v0_gauge() -> None:
    text = metrics(prefix_cache_hits_total=1, gpu_prefix_cache_hit_rate=0.9)
    assert (await VLLMDialect("b").load(Metrics(text))).prefix_hit_rate == 0.9
    text = metrics(prefix_cache_queries_total=4, gpu_prefix_cache_hit_rate=0.8)
    assert (await VLLMDialect("b").load(Metrics(text))).prefix_hit_rate == 0.8
