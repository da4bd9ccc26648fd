"""Trace readers: each public format read into arrival times and lengths; a malformed
row refused with the file and row named; a huge file read only as far as the limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bakeoff import traces
from bakeoff.traces import TraceError, read_trace

FIXTURES = Path(__file__).parent / "fixtures"


def test_azure_csv_gives_seconds_and_lengths() -> None:
    rows = read_trace(FIXTURES / "azure_conv.csv", "azure", limit=100)
    assert len(rows) == 6
    assert (rows[0].input_tokens, rows[0].output_tokens) == (374, 44)
    assert rows[1].timestamp_s - rows[0].timestamp_s == pytest.approx(4.314579, abs=1e-6)


def test_mooncake_keeps_hash_ids_and_millisecond_times() -> None:
    rows = read_trace(FIXTURES / "mooncake.jsonl", "mooncake", limit=100)
    assert [r.hash_ids for r in rows[:2]] == [(0, 1, 2), (0, 3)]
    assert rows[2].timestamp_s == 1.5


def test_sharegpt_takes_the_first_human_turn_and_the_next_gpt_length() -> None:
    rows = read_trace(FIXTURES / "sharegpt.json", "sharegpt", limit=100)
    # the second conversation has no human turn answered: skipped
    assert [r.extra["id"] for r in rows] == ["a1", "a3"]
    assert rows[1].prompt == "Name three sorting algorithms."
    assert rows[1].output_tokens == len("Quicksort, mergesort, heapsort.") // traces.CHARS_PER_TOKEN
    assert rows[0].timestamp_s is None


def test_bench_jsonl_reads_prompts_messages_and_lengths() -> None:
    rows = read_trace(FIXTURES / "bench.jsonl", "jsonl", limit=100)
    assert rows[0].prompt == "Say hello." and rows[0].tenant == "acme"
    assert rows[1].input_tokens == 40 and rows[1].prompt is None
    assert rows[2].timestamp_s == 2.0 and rows[2].messages[-1]["content"] == "Count to five."


@pytest.mark.parametrize(
    ("fmt", "text", "needle"),
    [
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,2\nyesterday,10,2\n",
            ":3: TIMESTAMP",
        ),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,ten,2\n", ":2: ContextTokens 'ten'"),
        ("azure", "time,in,out\n1,2,3\n", "header is TIMESTAMP,ContextTokens,GeneratedTokens"),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5}\n',
            ":2: a Mooncake row needs 'output_length'",
        ),
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["x"]}\n', ":1: hash_ids"),
        ("jsonl", '{"timestamp": 0, "prompt": "a"}\n{not json\n', ":2: not JSON"),
        ("jsonl", '{"prompt": "a"}\n', ":1: needs 'timestamp'"),
        ("sharegpt", '[{"conversations": [{"from": "human", "value": 3}]}]', "[0].conversations[0]"),
        ("sharegpt", '{"conversations": []}', "a JSON list of conversations"),
    ],
)
def test_a_malformed_row_is_refused_naming_the_row(tmp_path: Path, fmt: str, text: str, needle: str) -> None:
    path = tmp_path / "trace"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        read_trace(path, fmt, limit=100)  # type: ignore[arg-type]
    assert needle in str(err.value) and str(path) in str(err.value)


def test_a_huge_line_file_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("w") as f:
        for i in range(200_000):
            f.write(json.dumps({"timestamp": i, "input_length": 10, "output_length": 2}) + "\n")
        f.write("garbage after the limit\n")
    rows = read_trace(path, "mooncake", limit=50)
    assert len(rows) == 50  # the bad last line is never reached


def test_a_sharegpt_file_over_the_size_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.json"
    path.write_text("[" + ",".join(['{"conversations": []}'] * 100) + "]")
    monkeypatch.setattr(traces, "MAX_JSON_BYTES", 1000)
    with pytest.raises(TraceError, match="over 1000 bytes is refused"):
        read_trace(path, "sharegpt", limit=10)


def test_a_missing_file_and_an_empty_one_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace(tmp_path / "absent.csv", "azure", limit=10)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(TraceError, match="no rows"):
        read_trace(empty, "jsonl", limit=10)
