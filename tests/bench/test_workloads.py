"""Workload builders: lengths, shared prefixes, JSONL prompts, traces, tenants."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.workloads import assign_tenants, prompts_file, shared_prefix, synthetic, trace_file


def test_synthetic_lengths_follow_range_ratio() -> None:
    sessions = synthetic(200, input_tokens=100, output_tokens=40, range_ratio=0.5, seed=3)
    words = [s.turns[0].words for s in sessions]
    outs = [s.turns[0].max_tokens for s in sessions]
    assert min(words) >= 50 and max(words) <= 150 and len(set(words)) > 20
    assert min(outs) >= 20 and max(outs) <= 60
    # The body after the unique head has exactly `words` words.
    first = sessions[0].turns[0]
    assert len(first.content.split(":", 2)[-1].split()) == first.words
    fixed = synthetic(5, input_tokens=10, output_tokens=4)
    assert {s.turns[0].words for s in fixed} == {10} and {s.turns[0].max_tokens for s in fixed} == {4}


def test_shared_prefix_groups() -> None:
    sessions = shared_prefix(
        num_prefixes=3, suffixes_per_prefix=4, prefix_tokens=20, suffix_tokens=5, output_tokens=8, seed=0
    )
    assert len(sessions) == 12
    groups: dict[str, int] = {}
    for s in sessions:
        groups[s.system] = groups.get(s.system, 0) + 1
    assert sorted(groups.values()) == [4, 4, 4]
    assert all(len(p.split(":", 1)[1].split()) == 20 for p in groups)
    assert len({s.turns[0].content for s in sessions}) == 12
    # Shuffled: the first four do not all share one prefix.
    assert len({s.system for s in sessions[:4]}) > 1


def test_multi_turn_sessions() -> None:
    sessions = synthetic(3, 10, 5, turns=4, think_time_s=0.01)
    assert all(len(s.turns) == 4 and s.think_time_s == 0.01 for s in sessions)


def test_prompts_file_forms_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt": "hi there", "max_tokens": 3, "tenant": "acme"}\n\n'
        '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}\n'
        '{"turns": ["one", "two"]}\n'
    )
    sessions = prompts_file(f, default_max_tokens=9, n=4)
    assert [len(s.turns) for s in sessions] == [1, 1, 2, 1]
    assert sessions[0].tenant == "acme" and sessions[0].turns[0].max_tokens == 3
    assert sessions[1].extra["history"] == [{"role": "system", "content": "s"}]
    assert sessions[1].turns[0].max_tokens == 9
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        prompts_file(bad, None)
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="not JSON"):
        prompts_file(bad, None)


def test_trace_file(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(
        '{"timestamp_ms": 1000, "input_tokens": 7, "output_tokens": 2}\n'
        '{"timestamp_ms": 1250, "prompt": "hello", "tenant": "b"}\n'
    )
    stamps, sessions = trace_file(f, default_input=5, default_output=3)
    assert stamps == [1.0, 1.25]
    assert sessions[0].turns[0].words == 7 and sessions[0].turns[0].max_tokens == 2
    assert sessions[1].turns[0].content == "hello" and sessions[1].tenant == "b"


def test_tenant_weights() -> None:
    sessions = synthetic(4000, 4, 4)
    assign_tenants(sessions, [("a", 1.0), ("b", 3.0)], seed=0)
    share_b = sum(s.tenant == "b" for s in sessions) / len(sessions)
    assert share_b == pytest.approx(0.75, abs=0.03)
