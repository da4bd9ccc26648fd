"""Where a request was when its client went away: one name for each phase, used by
the generation, the dispatcher's retries and the ticket release alike."""

from __future__ import annotations

from enum import StrEnum


class CancelPhase(StrEnum):
    """The values are the `phase` label of the cancellation metrics."""

    QUEUED = "queued"  # waiting in the admission queue
    UPSTREAM_HEADERS = "upstream_headers"  # a stream dispatched, no event yet
    RETRY_BACKOFF = "retry_backoff"  # between failover rounds
    MID_STREAM = "mid_stream"  # a stream under way
    NON_STREAMING = "non_streaming"  # a whole answer being generated
