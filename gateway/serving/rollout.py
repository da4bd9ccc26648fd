"""A rollout on the request path: which track a request was given and served by, its
answer's tally, and the `TrackRecord` made of it when it ends.

Dispatch decides the track (`RolloutRequest`, policies/rollout_assign.py) and routing
keeps the request on its backends (policies/filters.py `on_track`); the generation
feeds the answer's events to its `AnswerCheck`; the recorder (gateway/observe/recorder.py),
the one place a request's end is written down, turns it into the `TrackRecord` it hands
the rollout sink, and tells a mirror copy waiting to compare (gateway/serving/mirror.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from adapters.base import Usage
from gateway.serving.answer_check import AnswerCheck
from policies.rollout_records import Track, TrackRecord, TrackShares

# The kind of failure a rollout's analysis counts, by the status the client got; a
# client's mistake (another 4xx) and a client that left say nothing about a track.
FAILURE_BY_STATUS = {408: "timeout", 504: "timeout", 429: "overload", 503: "overload"}


def failure_kind(status: int) -> str | None:
    """None for an answer; "timeout", "overload", "server_error"; "" when not recorded."""
    if status < 400:
        return None
    if status in FAILURE_BY_STATUS:
        return FAILURE_BY_STATUS[status]
    return "server_error" if status >= 500 else ""


@dataclass
class RolloutRequest:
    """One request of a model under rollout: the track assigned, the track whose
    backend served it (the other when the assigned one had none serving; the assigned
    one until a backend started, and when none did), the shares
    in force when it was assigned, its answer's tally, and (once it ended) its record,
    for a mirror copy that compares with it."""

    assigned: Track
    served: Track
    shares: TrackShares
    check: AnswerCheck
    ended: asyncio.Future[TrackRecord | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def fell_back(self) -> bool:
        return self.assigned != self.served

    def record(self, status: int, usage: Usage | None, ttft_s: float | None, left: bool) -> TrackRecord | None:
        """The request's `TrackRecord` (None: a client's mistake, or it left), once;
        a mirror copy waiting for it is told."""
        failure = "" if left else failure_kind(status)
        record = None
        if failure != "":
            check = self.check
            record = TrackRecord(
                track=self.served,
                at=time.time(),
                failure=failure,
                ttft_s=ttft_s,
                itl_s=check.itl_s,
                finish_reason=check.finish_reason,
                tool_calls_valid=check.tool_calls_valid,
                structured_valid=check.structured_valid,
                prompt_tokens=usage.prompt_tokens if usage is not None else None,
                completion_tokens=usage.completion_tokens if usage is not None else None,
            )
        if not self.ended.done():
            self.ended.set_result(record)
        return record
