"""What the rollout request-path tests share: a stable and a candidate simulator told
apart by their answers' length, the config of a model rolled out over them, and a
rollout sink that stands in for the controller (fixed shares, everything it is handed
kept)."""

from __future__ import annotations

import asyncio

from policies.rollout_records import MirrorComparison, TrackRecord, TrackShares

STABLE_TOKENS, CANDIDATE_TOKENS = 3, 5  # each simulator's answer length: which track answered


class Controller:
    """The rollout sink as a controller would be one: shares set by the test, each
    record and comparison kept in order."""

    def __init__(self, candidate: float = 0.0, mirror: float = 0.0) -> None:
        self.now = TrackShares(candidate, mirror)
        self.records: list[tuple[str, TrackRecord]] = []
        self.comparisons: list[tuple[str, MirrorComparison]] = []

    def shares(self, model: str) -> TrackShares:
        return self.now

    def record(self, model: str, record: TrackRecord) -> None:
        self.records.append((model, record))

    def compare(self, model: str, comparison: MirrorComparison) -> None:
        self.comparisons.append((model, comparison))

    async def compared(self, count: int, timeout_s: float = 30.0) -> list[MirrorComparison]:
        """The comparisons once `count` have come (TimeoutError: they did not)."""
        async with asyncio.timeout(timeout_s):
            while len(self.comparisons) < count:
                await asyncio.sleep(0.02)
        return [c for _, c in self.comparisons]


def backend(name: str, url: str, track: str = "stable") -> dict:
    return {"name": name, "adapter": "vllm", "url": url, "served_model": "sim-model", "track": track}


def rolled_out(stable_url: str, candidate_url: str, **rollout) -> dict:
    """Model `m` on one stable and one candidate backend, under `rollout` (the block's fields)."""
    return {
        "access_log": False,
        "models": {
            "m": {
                "backends": [backend("stable", stable_url), backend("cand", candidate_url, "candidate")],
                "max_retries": 0,
                "rollout": {"steps": [0.25, 0.5, 1.0], **rollout},
            }
        },
    }
