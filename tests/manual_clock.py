"""A clock a test moves by hand, for the policies that take one (ejection, retry
budget, KV index): what it reads is `now`, in seconds."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
