"""What a rollout store keeps and how (`rollout_memory`, `rollout_redis`: the same
semantics, tested against both).

Per model: the rollout's state (policies/rollout_state.py `RolloutState`), replaced only
by compare-and-set on its `version`, so replicas that judge the same window apply one
transition between them; the windows' records from every replica (one list per track and
window, and one of mirror comparisons), each capped and expiring, so a flood of requests
cannot grow the store without bound (beyond the cap a window is judged on its newest
records); a lease naming the one replica that judges windows now; and the last windows'
evidence (gate numbers, mirror differences) for the admin API, capped too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import orjson

from policies.rollout_records import MirrorComparison, TrackRecord
from policies.rollout_state import RolloutState

RECORDS_MAX = 2000  # per track and window
COMPARISONS_MAX = 500  # per window
EVIDENCE_MAX = 10  # windows' evidence kept per rollout
DIFFERENCES_MAX = 8  # differences kept per comparison
TEXT_MAX = 200  # characters kept of one difference or failure kind
WINDOWS_KEPT = 4  # a window's records live this many windows (plus a minute), then expire


class RolloutStoreUnavailable(Exception):
    """The shared store cannot be reached: the caller keeps what it knew (fail static)."""


@dataclass(frozen=True)
class WindowRecords:
    records: list[TrackRecord]
    comparisons: list[MirrorComparison]


def _text(value: str | None) -> str | None:
    return None if value is None else str(value)[:TEXT_MAX]


def encode_record(r: TrackRecord) -> bytes:
    return orjson.dumps(
        [
            r.track,
            r.at,
            _text(r.failure),
            r.ttft_s,
            r.itl_s,
            _text(r.finish_reason),
            r.tool_calls_valid,
            r.structured_valid,
            r.prompt_tokens,
            r.completion_tokens,
        ]
    )


def decode_record(raw: bytes | str) -> TrackRecord:
    track, at, failure, ttft, itl, finish, tools, structured, prompt, completion = orjson.loads(raw)
    return TrackRecord(track, at, failure, ttft, itl, finish, tools, structured, prompt, completion)


def encode_comparison(m: MirrorComparison) -> bytes:
    differences = [d[:TEXT_MAX] for d in m.differences[:DIFFERENCES_MAX]]
    return orjson.dumps([m.at, differences, _text(m.stable_failure), _text(m.candidate_failure)])


def decode_comparison(raw: bytes | str) -> MirrorComparison:
    at, differences, stable_failure, candidate_failure = orjson.loads(raw)
    return MirrorComparison(at, tuple(differences), stable_failure, candidate_failure)


def encode_state(state: RolloutState) -> bytes:
    return orjson.dumps(state.to_dict())


def decode_state(raw: bytes | str | None) -> RolloutState | None:
    return None if raw is None else RolloutState.from_dict(orjson.loads(raw))


class RolloutStore(ABC):
    kind: str

    @abstractmethod
    async def ensure(self, model: str, rollout_id: str, now: float) -> RolloutState:
        """The model's state; a fresh `pending` one when there is none or it belongs to
        another rollout id (a changed rollout block is a new rollout). The new state's
        version follows the old one's, so a stale compare-and-set never lands."""

    @abstractmethod
    async def load(self, model: str) -> RolloutState | None: ...

    @abstractmethod
    async def swap(self, model: str, expected_version: int, new: RolloutState) -> bool:
        """Store `new` if the stored version is still `expected_version` (and its rollout
        id `new`'s); False when another replica moved first (read it again)."""

    @abstractmethod
    async def push(
        self,
        model: str,
        rollout_id: str,
        window: int,
        window_s: float,
        records: list[TrackRecord],
        comparisons: list[MirrorComparison],
    ) -> None:
        """Append one replica's records of one window (capped, expiring)."""

    @abstractmethod
    async def window(self, model: str, rollout_id: str, window: int) -> WindowRecords: ...

    @abstractmethod
    async def lease(self, model: str, owner: str, ttl_s: float) -> bool:
        """Take or renew the judging lease; False while another owner holds it."""

    @abstractmethod
    async def put_evidence(self, model: str, rollout_id: str, entry: dict[str, Any]) -> None:
        """Keep one window's evidence (the newest EVIDENCE_MAX)."""

    @abstractmethod
    async def evidence(self, model: str, rollout_id: str) -> list[dict[str, Any]]:
        """The kept evidence, newest first."""

    async def aclose(self) -> None:
        return None
