"""A check is a small declared unit: id, area, level, profile, one-line
description, and an async function that judges the server through a Context.

The function returns None to pass, raises `CheckFailed` (with evidence) to fail
and `Skipped` to skip. Any other exception is an `error`: the check could
not reach a verdict, which is never reported as a pass.

`needs` names the capabilities (conformance/capabilities.py) the check judges;
on a target declared without one of them the check does not run and is `na`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from conformance.context import Context
from conformance.result import Level

PROFILES = ("core", "tools", "structured", "gateway", "responses", "embeddings")

CheckFn = Callable[[Context], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Check:
    id: str
    area: str
    level: Level
    profile: str
    description: str
    fn: CheckFn
    needs: tuple[str, ...] = ()


class CheckList(list[Check]):
    """The checks one module declares, in the order they are written."""

    def __init__(self, area: str, profile: str = "core", needs: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.area = area
        self.profile = profile
        self.needs = needs

    def must(self, check_id: str, description: str, *, profile: str | None = None) -> Callable[[CheckFn], CheckFn]:
        return self._declare(check_id, Level.MUST, description, profile)

    def should(self, check_id: str, description: str, *, profile: str | None = None) -> Callable[[CheckFn], CheckFn]:
        return self._declare(check_id, Level.SHOULD, description, profile)

    def _declare(
        self, check_id: str, level: Level, description: str, profile: str | None
    ) -> Callable[[CheckFn], CheckFn]:
        prof = profile or self.profile
        if prof not in PROFILES:
            raise ValueError(f"unknown profile {prof!r}")

        def add(fn: CheckFn) -> CheckFn:
            self.append(Check(check_id, self.area, level, prof, description, fn, self.needs))
            return fn

        return add
