"""bench/internal/request_cost.py: its tracer's counts, and a run end to end on tiny numbers."""

from __future__ import annotations

import pytest

from bench.internal.request_cost import Counter, main


def _twice(x: int) -> int:
    return x * 2


def test_the_counter_counts_calls_and_instructions_only_while_on() -> None:
    c = Counter()
    _twice(1)
    c.on()
    try:
        _twice(2)
        _twice(3)
    finally:
        c.off()
    _twice(4)
    name = next(n for n in c.calls if n.endswith(":_twice"))
    assert name.startswith("bench/test_request_cost.py:")
    assert c.calls[name] == 2
    assert c.instructions[name] >= 2 * 3  # a load, a multiply, a return at least, each time


def test_a_tiny_run_prints_the_cpu_the_counts_and_the_top_functions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--n", "20", "--count", "5", "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("non-streamed chat, in process: ") and lines[0].endswith(" us CPU per request")
    instructions = int(lines[1].split(" Python instructions")[0].replace(",", ""))
    assert instructions > 1000  # a request through the whole gateway runs thousands
    assert len(lines) == 5 and all(":" in line for line in lines[2:])
