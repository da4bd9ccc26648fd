"""Pure pieces of the simulators: fault markers, the synthetic source, prompt
counting, tool-call arguments, the prefix cache and the metrics text."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from simulators.faults import NO_FAULTS, Faults, faults_for, parse_spec
from simulators.prefix_cache import BLOCK_TOKENS, PrefixCache
from simulators.promtext import Exposition, Histogram
from simulators.request import SimRequest, prompt_words_chat, prompt_words_completion, with_default_system
from simulators.tokens import SyntheticSource
from simulators.toolcalls import arguments_for, plan_tool_call
from tests.simulators.conftest import TOOLS


def _request(words: list[str], **kw: object) -> SimRequest:
    return SimRequest(request_id="r", kind="completion", prompt_words=words, prompt_text=" ".join(words), **kw)


def _run(gen: object) -> list:
    async def go() -> list:
        return [t async for t in gen]  # type: ignore[attr-defined]

    return asyncio.run(go())


def test_marker_parsing_and_precedence() -> None:
    assert parse_spec("error_after=3, no_done") == {"error_after": 3, "no_done": True}
    assert parse_spec("ttft_ms=2.5 bogus=1 finish=abort") == {"ttft_ms": 2.5, "finish": "abort"}
    assert parse_spec("error_after=-3, status=abc, itl_ms=-1") == {}
    default = Faults(error_after=9)
    faults = faults_for(default, ["hi [[sim:cut_after=2]] there"], {"sim_fault": {"status": 503}})
    assert (faults.error_after, faults.cut_after, faults.status) == (9, 2, 503)
    assert faults_for(NO_FAULTS, ["plain text"], {}) is NO_FAULTS


def test_the_broken_runtimes_keys_parse() -> None:
    spec = "usage_extra=2, overload_status=500, keep_cancelled"
    assert parse_spec(spec) == {"usage_extra": 2, "overload_status": 500, "keep_cancelled": True}
    assert faults_for(NO_FAULTS, ["[[sim:keep_cancelled]]"], {}).keep_cancelled


def test_a_default_system_prompt_is_rendered_only_into_a_chat_without_one() -> None:
    chat = [{"role": "user", "content": "hi there"}]
    rendered = with_default_system(chat, "You are helpful.")
    assert rendered == [{"role": "system", "content": "You are helpful."}, *chat]
    assert len(prompt_words_chat(rendered)) == len(prompt_words_chat(chat)) + 1 + 3
    own = [{"role": "system", "content": "be brief"}, *chat]
    assert with_default_system(own, "You are helpful.") is own
    assert with_default_system(chat, None) is chat


def test_prompt_token_rule() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a b c"}]},
    ]
    # one role marker per message + words + the generation prompt
    assert len(prompt_words_chat(messages)) == (1 + 2) + (1 + 3) + 1
    assert prompt_words_completion("one two  three") == ["one", "two", "three"]
    assert prompt_words_completion([5, 6, 7]) == ["5", "6", "7"]


def test_synthetic_is_deterministic_and_ends_with_eos() -> None:
    source = SyntheticSource(seed=1, output_tokens=5, max_model_len=100, ttft_ms=0, itl_ms=0)
    first = _run(source.generate(_request(["a", "b"])))
    second = _run(source.generate(_request(["a", "b"])))
    assert [t.text for t in first] == [t.text for t in second]
    assert len(first) == 5 and first[-1].finish == "eos" and first[-1].text == ""
    other_seed = SyntheticSource(seed=2, output_tokens=5, max_model_len=100, ttft_ms=0, itl_ms=0)
    assert [t.text for t in _run(other_seed.generate(_request(["a", "b"])))] != [t.text for t in first]


def test_synthetic_length_ignore_eos_and_context_clamp() -> None:
    source = SyntheticSource(seed=0, output_tokens=50, max_model_len=20, ttft_ms=0, itl_ms=0)
    capped = _run(source.generate(_request(["w"] * 5, max_tokens=3)))
    assert len(capped) == 3 and capped[-1].finish == "length" and capped[-1].text
    forced = _run(
        SyntheticSource(seed=0, output_tokens=2, max_model_len=100, ttft_ms=0, itl_ms=0).generate(
            _request(["w"], max_tokens=7, ignore_eos=True)
        )
    )
    assert len(forced) == 7 and forced[-1].finish == "length"
    clamped = _run(source.generate(_request(["w"] * 15)))
    assert len(clamped) == 5  # the room left in a 20-token context


def test_synthetic_stop_string_and_n() -> None:
    source = SyntheticSource(seed=0, output_tokens=40, max_model_len=1000, ttft_ms=0, itl_ms=0)
    full = "".join(t.text for t in _run(source.generate(_request(["x"]))))
    stop = full.split()[3]
    tokens = _run(source.generate(_request(["x"], stop=[stop])))
    assert tokens[-1].finish == "stop_sequence" and tokens[-1].matched == stop
    assert stop not in "".join(t.text for t in tokens)
    both = _run(source.generate(_request(["x"], n=2)))
    assert {t.index for t in both} == {0, 1}
    assert sum(1 for t in both if t.finish) == 2


def test_abort_ends_every_choice() -> None:
    source = SyntheticSource(seed=0, output_tokens=1000, max_model_len=5000, ttft_ms=0, itl_ms=1)
    gen = source.generate(_request(["x"], n=2))

    async def go() -> list:
        seen = []
        async for token in gen:
            seen.append(token)
            if len(seen) == 4:
                gen.abort()
        return seen

    seen = asyncio.run(go())
    assert [t.finish for t in seen if t.finish] == ["abort", "abort"]
    assert len(seen) < 20


def test_tool_arguments_follow_the_schema() -> None:
    params = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "n": {"type": ["integer", "null"]}},
    }
    assert arguments_for(params) == {"city": "sim", "unit": "c", "n": 1}
    assert plan_tool_call(TOOLS, "auto", marker=False) is None
    assert plan_tool_call(TOOLS, "none", marker=True) is None
    plan = plan_tool_call(TOOLS, {"type": "function", "function": {"name": "get_weather"}}, marker=False)
    assert plan is not None and plan.arguments == {"city": "sim"}


def test_prefix_cache_counts_whole_shared_blocks() -> None:
    cache = PrefixCache()
    shared = [f"w{i}" for i in range(BLOCK_TOKENS * 2)]
    assert cache.lookup_and_insert(shared + ["a"] * 5) == 0
    assert cache.lookup_and_insert(shared + ["b"] * 20) == BLOCK_TOKENS * 2
    assert cache.lookup_and_insert(["z"] + shared) == 0
    assert 0 < cache.hit_rate < 1


def test_exposition_parses_as_prometheus_text() -> None:
    hist = Histogram((0.1, 1.0))
    for v in (0.05, 0.5, 5.0):
        hist.observe(v)
    ex = Exposition({"model_name": "m"})
    ex.gauge("x:running", "running", 3)
    ex.counter("x:tokens", "tokens", 7)
    ex.histogram("x:ttft_seconds", "ttft", hist)
    families = {f.name: f for f in text_string_to_metric_families(ex.text())}
    assert families["x:running"].samples[0].value == 3
    assert families["x:tokens"].samples[0].value == 7
    buckets = {s.labels["le"]: s.value for s in families["x:ttft_seconds"].samples if s.name.endswith("_bucket")}
    assert buckets == {"0.1": 1, "1.0": 2, "+Inf": 3}
