"""Runs a load plan: open loop (precomputed arrivals) or closed loop (N workers).

Open loop: one scheduler task sleeps until each arrival's time, measured from the
run's start, and starts that session as its own task without waiting for any
earlier one, so a slow server never delays later sends. Each record keeps its
scheduled and actual send time; the report shows the lag.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.client import Client
from bench.progress import Progress
from bench.records import RequestRecord
from bench.workloads import Session


@dataclass(slots=True)
class LoadPlan:
    sessions: Sequence[Session]
    arrivals: Sequence[float] | None = None  # open loop: offsets per session
    concurrency: int | None = None  # closed loop, or a cap on an open loop
    cancel_rate: float = 0.0  # fraction of requests the client abandons
    cancel_delay_s: float = 0.0  # ... this long after sending them
    seed: int = 0
    duration_s: float | None = None  # closed loop: start no session after this long

    def __post_init__(self) -> None:
        if self.arrivals is None and not self.concurrency:
            raise ValueError("a plan needs arrivals (open loop) or a concurrency (closed loop)")
        if self.arrivals is not None and len(self.arrivals) != len(self.sessions):
            raise ValueError("one arrival per session")
        if not 0.0 <= self.cancel_rate <= 1.0:
            raise ValueError("cancel_rate must be within [0, 1]")

    @property
    def total_requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


class Runner:
    def __init__(self, client: Client, plan: LoadPlan, progress: Progress | None = None) -> None:
        self.client = client
        self.plan = plan
        self.progress = progress or Progress(plan.total_requests, enabled=False)
        self.records: list[RequestRecord] = []
        rng = np.random.default_rng(plan.seed + 2)
        # Decided up front, so the same seed cancels the same requests in every run.
        self._cancel = rng.random(plan.total_requests) < plan.cancel_rate
        self._next_index = 0
        self._t0 = 0.0
        self._cap = asyncio.Semaphore(plan.concurrency) if plan.concurrency and plan.arrivals is not None else None

    async def run(self) -> list[RequestRecord]:
        self._t0 = time.perf_counter()
        self.progress.start()
        try:
            if self.plan.arrivals is not None:
                await self._open_loop(self.plan.arrivals)
            else:
                await self._closed_loop(self.plan.concurrency or 1)
        finally:
            await self.progress.stop()
        self.records.sort(key=lambda r: r.index)
        return self.records

    async def _open_loop(self, arrivals: Sequence[float]) -> None:
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[None]] = []
        for sid, (at, session) in enumerate(zip(arrivals, self.plan.sessions)):
            # Always against the run's origin, never the previous send: no drift.
            delay = self._t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(loop.create_task(self._session(sid, session, scheduled_s=at)))
        await asyncio.gather(*tasks)

    async def _closed_loop(self, concurrency: int) -> None:
        queue = iter(enumerate(self.plan.sessions))

        deadline = self._t0 + self.plan.duration_s if self.plan.duration_s else None

        async def worker() -> None:
            for sid, session in queue:  # a shared iterator: each session runs once
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                await self._session(sid, session, scheduled_s=None)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def _session(self, sid: int, session: Session, scheduled_s: float | None) -> None:
        history: list[dict[str, Any]] = []
        if session.system:
            history.append({"role": "system", "content": session.system})
        history.extend(session.extra.get("history", ()))
        multi = len(session.turns) > 1
        for k, turn in enumerate(session.turns):
            if k and session.think_time_s:
                await asyncio.sleep(session.think_time_s)
            index = self._next_index
            self._next_index += 1
            messages = [*history, {"role": "user", "content": turn.content}]
            rec = RequestRecord(
                index=index,
                tenant=session.tenant,
                session=sid,
                turn=k,
                stream=self.client.config.stream,
                sent_s=0.0,
                scheduled_s=scheduled_s if k == 0 else None,
                prompt_words=turn.words,
                prompt_tokens_sized=turn.tokens,
                max_tokens=turn.max_tokens,
            )
            cancel_after = self.plan.cancel_delay_s if self._cancel[index] else None
            self.records.append(rec)
            self.progress.sent += 1
            if self._cap is not None:
                async with self._cap:
                    answer = await self.client.send(rec, messages, self._t0, cancel_after, keep_text=multi)
            else:
                answer = await self.client.send(rec, messages, self._t0, cancel_after, keep_text=multi)
            self.progress.done += 1
            if rec.outcome != "ok":
                self.progress.failed += rec.outcome == "failed"
                self.progress.cancelled += rec.outcome == "cancelled"
                # The rest of a conversation makes no sense without this answer.
                self.progress.done += len(session.turns) - k - 1
                self.progress.sent += len(session.turns) - k - 1
                return
            history = [*messages, {"role": "assistant", "content": answer}]
