"""What the harness sends: sessions of one or more user turns.

A session is the unit an arrival starts (open loop) or a closed-loop worker runs.
Single-turn workloads have one turn per session; a multi-turn conversation sends
turn k+1 after turn k's answer (plus a think time), with the real answer in its
history, as a chat user would.

Synthetic prompts are sized in tokens of the target's tokenizer when a
`PromptSizer` has a token counter (bench/sizing.py, bench/token_count.py);
without one "N tokens" means N common English words, and the reports say that
the lengths are an estimate. Servers' usage counts are reported as measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.sizing import PromptSizer


@dataclass(slots=True)
class Turn:
    content: str
    max_tokens: int | None = None
    words: int = 0  # prompt size of this turn, in synthetic words
    tokens: int | None = None  # ... in tokens as the sizer counted them; None when not counted


@dataclass(slots=True)
class Session:
    turns: list[Turn]
    tenant: str = "default"
    system: str | None = None  # a shared prefix goes here, so it leads every request
    think_time_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # request fields from a JSONL file


def _length(rng: np.random.Generator, mean: int, range_ratio: float) -> int:
    # vLLM bench's random dataset: uniform integers in [floor(L(1-r)), ceil(L(1+r))].
    if range_ratio <= 0:
        return mean
    lo = max(1, math.floor(mean * (1 - range_ratio)))
    hi = max(lo, math.ceil(mean * (1 + range_ratio)))
    return int(rng.integers(lo, hi + 1))


def _unique_head(i: int) -> str:
    # A distinct opening per request keeps unrelated prompts from sharing a
    # prefix-cache hit by accident; the shared-prefix workload puts its prefix first.
    return f"request {i}:"


def synthetic(
    n: int,
    input_tokens: int,
    output_tokens: int,
    range_ratio: float = 0.0,
    turns: int = 1,
    think_time_s: float = 0.0,
    seed: int = 0,
    sizer: PromptSizer | None = None,
) -> list[Session]:
    rng = np.random.default_rng(seed)
    sizer = sizer or PromptSizer()
    sessions = []
    for i in range(n):
        ts = []
        for k in range(turns):
            sized = sizer.text(rng, f"{_unique_head(i)} turn {k}:", _length(rng, input_tokens, range_ratio))
            ts.append(Turn(sized.text, _length(rng, output_tokens, range_ratio), sized.words, sized.tokens))
        sessions.append(Session(ts, think_time_s=think_time_s))
    return sessions


def shared_prefix(
    num_prefixes: int,
    suffixes_per_prefix: int,
    prefix_tokens: int,
    suffix_tokens: int,
    output_tokens: int,
    seed: int = 0,
    sizer: PromptSizer | None = None,
) -> list[Session]:
    """N prefixes x M suffixes, shuffled (vLLM's prefix_repetition): the prefix is
    the system message, so every request of a group starts with the same tokens."""
    rng = np.random.default_rng(seed)
    sizer = sizer or PromptSizer()
    prefixes = [sizer.text(rng, f"prefix {p}:", prefix_tokens) for p in range(num_prefixes)]
    sessions = []
    for p in range(num_prefixes):
        for s in range(suffixes_per_prefix):
            suffix = sizer.text(rng, _unique_head(p * suffixes_per_prefix + s), suffix_tokens)
            tokens = (
                prefixes[p].tokens + suffix.tokens
                if prefixes[p].tokens is not None and suffix.tokens is not None
                else None
            )
            turn = Turn(suffix.text, output_tokens, prefix_tokens + suffix_tokens, tokens)
            sessions.append(Session([turn], system=prefixes[p].text))
    order = rng.permutation(len(sessions))
    return [sessions[i] for i in order]


def _session_from_row(row: dict[str, Any], default_max_tokens: int | None, where: str) -> Session:
    max_tokens = row.get("max_tokens", row.get("output_tokens", default_max_tokens))
    if "messages" in row:
        msgs = row["messages"]
        if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict):
            raise ValueError(f"{where}: 'messages' must be a non-empty list of messages")
        # The last message is the turn; earlier ones become fixed history.
        content = msgs[-1].get("content", "")
        return Session(
            [Turn(str(content), max_tokens, len(str(content).split()))],
            tenant=row.get("tenant", "default"),
            extra={"history": msgs[:-1]},
        )
    if "prompt" in row:
        text = str(row["prompt"])
        return Session([Turn(text, max_tokens, len(text.split()))], tenant=row.get("tenant", "default"))
    if "turns" in row:
        turns = [Turn(str(t), max_tokens, len(str(t).split())) for t in row["turns"]]
        return Session(turns, tenant=row.get("tenant", "default"))
    raise ValueError(f"{where}: each line needs 'prompt', 'messages' or 'turns'")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{lineno}: each line must be a JSON object")
        rows.append(row)
    return rows


def prompts_file(path: Path, default_max_tokens: int | None, n: int | None = None) -> list[Session]:
    """A JSONL of {"prompt": ...} | {"messages": [...]} | {"turns": [...]}, with optional
    "max_tokens" and "tenant"; cycled when n is larger than the file."""
    rows = read_jsonl(path)
    if not rows:
        raise ValueError(f"{path}: no prompts")
    sessions = [_session_from_row(r, default_max_tokens, f"{path}:{i + 1}") for i, r in enumerate(rows)]
    if n is None:
        return sessions
    return [sessions[i % len(sessions)] for i in range(n)]


def trace_file(
    path: Path, default_input: int, default_output: int, seed: int = 0, sizer: PromptSizer | None = None
) -> tuple[list[float], list[Session]]:
    """A timestamped trace: one JSON object per line with "timestamp" (seconds) or
    "timestamp_ms", plus a prompt ("prompt"/"messages") or lengths
    ("input_tokens", "output_tokens"), and optional "tenant"."""
    rng = np.random.default_rng(seed)
    sizer = sizer or PromptSizer()
    stamps: list[float] = []
    sessions: list[Session] = []
    for i, row in enumerate(read_jsonl(path)):
        if "timestamp" in row:
            stamps.append(float(row["timestamp"]))
        elif "timestamp_ms" in row:
            stamps.append(float(row["timestamp_ms"]) / 1000.0)
        else:
            raise ValueError(f"{path}:{i + 1}: needs 'timestamp' (s) or 'timestamp_ms'")
        if "prompt" in row or "messages" in row or "turns" in row:
            sessions.append(_session_from_row(row, default_output, f"{path}:{i + 1}"))
        else:
            sized = sizer.text(rng, _unique_head(i), int(row.get("input_tokens", default_input)))
            turn = Turn(sized.text, int(row.get("output_tokens", default_output)), sized.words, sized.tokens)
            sessions.append(Session([turn], tenant=row.get("tenant", "default")))
    return stamps, sessions


def assign_tenants(sessions: Sequence[Session], tenants: Sequence[tuple[str, float]], seed: int = 0) -> None:
    """Give each session without a tenant of its own one of `tenants` (name, weight)."""
    if not tenants:
        return
    rng = np.random.default_rng(seed + 1)
    names = [t for t, _ in tenants]
    weights = np.asarray([w for _, w in tenants], dtype=float)
    picks = rng.choice(len(names), size=len(sessions), p=weights / weights.sum())
    for s, k in zip(sessions, picks):
        if s.tenant == "default":
            s.tenant = names[int(k)]
