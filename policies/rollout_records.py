"""What a rollout's analysis reads and what the request path reads of a rollout.

The request path (gateway/serving) writes one `TrackRecord` per request of a model under
rollout and one `MirrorComparison` per mirrored request; the analysis
(policies/rollout.py) judges a window of them. The request path reads only `TrackShares`:
which share of sessions the candidate serves and which share of stable requests are
mirrored to it. Plain data, standard library only, so both sides test without HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

Track = Literal["stable", "candidate"]


@dataclass(frozen=True)
class TrackShares:
    """The rollout as the request path sees it for one model: `candidate` in [0, 1] is the
    share of assignment keys (sessions, else tenants, else requests) the candidate serves;
    `mirror` in [0, 1] the share of stable requests copied to the candidate."""

    candidate: float = 0.0
    mirror: float = 0.0

    @property
    def active(self) -> bool:
        return self.candidate > 0.0 or self.mirror > 0.0


NO_ROLLOUT = TrackShares()


@dataclass(frozen=True)
class TrackRecord:
    """One client request served by one track, as the gateway saw it.

    `failure` is None for a good answer, else the class of its error's kind: "timeout"
    (deadline or upstream timeout), "server_error" (5xx or a mid-stream error),
    "overload" (the backend's 429/503, or no connection). Client mistakes and clients
    that left are not recorded: they say nothing about the track. `tool_calls_valid` / `structured_valid`
    are None when the request asked for neither (then they are not judged)."""

    track: Track
    at: float  # wall-clock seconds when the request ended
    failure: str | None = None
    ttft_s: float | None = None
    itl_s: float | None = None  # mean gap between output tokens after the first
    finish_reason: str | None = None
    tool_calls_valid: bool | None = None
    structured_valid: bool | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class MirrorComparison:
    """A stable request copied to the candidate: the two answers compared, the
    candidate's discarded. `differences` names what differed (empty: alike), e.g.
    "finish_reason: stop != length", "tool_call: name get_weather != lookup",
    "tool_call: arguments not JSON", "structured: not schema-valid",
    "usage: prompt_tokens 41 != 40"."""

    at: float
    differences: tuple[str, ...] = field(default_factory=tuple)
    stable_failure: str | None = None
    candidate_failure: str | None = None

    @property
    def alike(self) -> bool:
        return not self.differences and self.candidate_failure == self.stable_failure


class RolloutSink(Protocol):
    """What the request path hands a rollout and reads of it, per model under rollout:
    `record` each request's `TrackRecord`, `compare` each mirrored request's
    `MirrorComparison`, `shares` the shares in force now. Called on the event loop, on
    the request path: each call must return at once (no I/O awaited; buffer and flush
    elsewhere). The rollout controller (gateway/lifecycle/rollout.py) implements it."""

    def record(self, model: str, record: TrackRecord) -> None: ...

    def compare(self, model: str, comparison: MirrorComparison) -> None: ...

    def shares(self, model: str) -> TrackShares: ...
