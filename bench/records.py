"""What the harness records about each request: raw timestamps, never derived numbers.

Every time is in seconds. `sent_s` and `scheduled_s` are offsets from the run's
start; `chunk_times` and `end_s` are offsets from `sent_s`. Metrics are computed
later from these (bench/metrics.py), so a report can always be recomputed with
other definitions from its JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Outcome = Literal["ok", "failed", "cancelled"]
# Why a request failed. `http_status`: the answer was not 200. `stream_error`: an
# error event arrived after a 200 (a failure even if content came before it).
# `timeout`: the client gave up. `cut_stream`: the stream ended without
# `data: [DONE]` (or a non-streaming body was not a completion). `connection`: no
# HTTP answer at all (refused, reset before headers).
FailureKind = Literal["http_status", "stream_error", "timeout", "cut_stream", "connection"]
FAILURE_KINDS: tuple[str, ...] = ("http_status", "stream_error", "timeout", "cut_stream", "connection")


@dataclass(slots=True)
class RequestRecord:
    index: int
    tenant: str
    session: int
    turn: int
    stream: bool
    sent_s: float
    scheduled_s: float | None = None  # None in closed loop: sent when a slot frees
    prompt_words: int = 0
    # The new turn's text (and system prefix) in tokens as the prompt sizer counted them
    # (bench/sizing.py); None when the size is an estimate or the text came from a file.
    prompt_tokens_sized: int | None = None
    max_tokens: int | None = None
    status: int | None = None
    # Arrival time of every content-bearing chunk (text, reasoning or tool-call
    # delta that is not empty); role-only, empty and usage-only chunks are absent.
    chunk_times: list[float] = field(default_factory=list)
    chunks_total: int = 0  # every `data:` event, content or not, before [DONE]
    end_s: float | None = None  # last byte of the answer
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    cached_tokens: int | None = None
    output_chars: int = 0
    finish_reason: str | None = None
    outcome: Outcome = "ok"
    failure_kind: FailureKind | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)
