"""What a simulator saw: requests, aborts, concurrency, and the last bodies.

Served at `GET /_sim/stats` and cleared by `POST /_sim/reset`, so a test can ask a
simulator whether the gateway really aborted upstream work (and how) and what
exactly the gateway sent it.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

LAST_REQUESTS_KEPT = 200
ABORTS_KEPT = 1000


class Recorder:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.reset()

    def reset(self) -> None:
        self.requests_total = 0
        self.completed = 0
        self.failed = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.aborted = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.finish_reasons: dict[str, int] = {}
        self.statuses: dict[str, int] = {}
        self.aborts: deque[dict[str, Any]] = deque(maxlen=ABORTS_KEPT)
        self.last_requests: deque[dict[str, Any]] = deque(maxlen=LAST_REQUESTS_KEPT)
        # request id -> (path, how many requests with that id are live: clients may reuse an id)
        self.live: dict[str, tuple[str, int]] = {}

    def received(self, path: str, body: Any, headers: dict[str, str]) -> None:
        """Every request to a generation endpoint, valid or not."""
        self.requests_total += 1
        self.last_requests.append({"path": path, "body": body, "headers": headers, "at": time.time()})

    def started(self, request_id: str, path: str) -> None:
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        _, count = self.live.get(request_id, (path, 0))
        self.live[request_id] = (path, count + 1)

    def _end(self, request_id: str) -> str | None:
        """Take one live request with this id off the books; its path, or None if none was live."""
        entry = self.live.get(request_id)
        if entry is None:
            return None
        path, count = entry
        if count > 1:
            self.live[request_id] = (path, count - 1)
        else:
            del self.live[request_id]
        self.in_flight -= 1
        return path

    def finished(self, request_id: str, *, finish: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        if self._end(request_id) is None:
            return
        self.completed += 1
        self.prompt_tokens_total += prompt_tokens
        self.generation_tokens_total += completion_tokens
        if finish:
            self.finish_reasons[finish] = self.finish_reasons.get(finish, 0) + 1

    def failed_request(self, request_id: str) -> None:
        if self._end(request_id) is None:
            return
        self.failed += 1

    def abort(self, request_id: str, how: str) -> None:
        """`how`: "disconnect" (the client went away) or "abort_request" (explicit endpoint)."""
        path = self._end(request_id)
        self.aborted += 1
        self.aborts.append({"request_id": request_id, "how": how, "path": path, "at": time.time()})

    def openai_finish_counts(self) -> dict[str, int]:
        """Finished requests by OpenAI-style reason: EOS and stop strings both count as "stop"."""
        counts: dict[str, int] = {"stop": 0, "length": 0, "abort": 0, "repetition": 0}
        for reason, n in self.finish_reasons.items():
            key = "stop" if reason in ("eos", "stop_sequence") else reason
            counts[key] = counts.get(key, 0) + n
        return counts

    def status(self, code: int) -> None:
        key = str(code)
        self.statuses[key] = self.statuses.get(key, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "requests_total": self.requests_total,
            "completed": self.completed,
            "failed": self.failed,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "aborted": self.aborted,
            "aborts": list(self.aborts),
            "live_request_ids": list(self.live),
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
            "finish_reasons": dict(self.finish_reasons),
            "statuses": dict(self.statuses),
            "last_requests": list(self.last_requests),
        }
