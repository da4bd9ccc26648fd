"""A rollout on the request path: which track a request was given and served by, its
answer's tally, and the `TrackRecord` the recorder makes of it when it ends (then a
mirror copy waiting to compare is told). docs/architecture.md, "Rollouts on the
request path".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from adapters.base import Usage
from adapters.errors import FailureKind
from gateway.serving.answer_check import AnswerCheck
from policies.rollout_records import Track, TrackRecord, TrackShares

# The class a rollout's analysis counts, by the kind the error carries (`GatewayError.failure`,
# its one owner): a backend that could not take the request at all is overload's.
FAILURE_CLASS = {
    FailureKind.TIMEOUT: "timeout",
    FailureKind.OVERLOAD: "overload",
    FailureKind.CONNECT: "overload",
    FailureKind.SERVER_ERROR: "server_error",
}


def failure_class(failure: FailureKind | None) -> str:
    """The analysis' class of an error of kind `failure`: "timeout", "overload",
    "server_error"; "" for no backend's failure (a client's mistake): it says nothing
    about a track."""
    return "" if failure is None else FAILURE_CLASS[failure]


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

    def record(
        self, status: int, failure: FailureKind | None, usage: Usage | None, ttft_s: float | None, left: bool
    ) -> TrackRecord | None:
        """The request's `TrackRecord` (None: a client's mistake, or it left), once;
        a mirror copy waiting for it is told. `failure`: the kind its error carried."""
        kind: str | None = "" if left else failure_class(failure) if status >= 400 else None
        record = None
        if kind != "":
            check = self.check
            record = TrackRecord(
                track=self.served,
                at=time.time(),
                failure=kind,
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
