"""A one-line progress bar on stderr, redrawn a few times a second by its own task
(never per request, which would cost CPU at thousands of requests per second)."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str = "", stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = total
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.sent = 0
        self.done = 0
        self.failed = 0
        self.cancelled = 0
        self._start = time.perf_counter()
        self._task: asyncio.Task[None] | None = None

    def line(self) -> str:
        width = 30
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        elapsed = time.perf_counter() - self._start
        rps = self.done / elapsed if elapsed > 0 else 0.0
        return (
            f"{self.label}[{bar}] {self.done}/{self.total} in-flight {self.sent - self.done} "
            f"failed {self.failed} cancelled {self.cancelled} {elapsed:5.1f}s {rps:7.1f} req/s"
        )

    async def _draw(self) -> None:
        while True:
            self.stream.write("\r" + self.line())
            self.stream.flush()
            await asyncio.sleep(0.25)

    def start(self) -> None:
        self._start = time.perf_counter()
        if self.enabled:
            self._task = asyncio.get_running_loop().create_task(self._draw())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self.stream.write("\r" + self.line() + "\n")
            self.stream.flush()
