"""What a check concludes, and the evidence a release engineer reads on failure.

A check ends in exactly one of five statuses. Only `pass` counts as passing: a
check that could not run is `skip` (with the reason) or `error` (it broke
before reaching a verdict), never `pass`. `na` (not applicable) is decided
before a check runs, from what the target is declared to be (its capabilities,
whether it is a simulator): the check has nothing to judge there.

A run's verdict (`Verdict`) follows from its MUST checks; the rule is in
conformance/README.md ("Verdicts and exit codes").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Level(StrEnum):
    MUST = "MUST"  # the spec requires it or the official client breaks without it
    SHOULD = "SHOULD"  # convention, benchmark-client compatibility, or quality


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"
    NA = "na"  # not applicable to this target by its declared capabilities


class Verdict(StrEnum):
    PASS = "PASS"  # every MUST that applies ran and passed
    FAIL = "FAIL"  # a MUST failed or errored
    INCOMPLETE = "INCOMPLETE"  # no MUST failed, but a MUST was skipped, or none ran at all


@dataclass(slots=True)
class Evidence:
    """One concrete observation behind a failure: what was sent, what came back
    (the offending chunk or field), what the spec expects and what was seen."""

    expected: str
    seen: str
    where: str = ""  # a JSON path, "event 3", a header name
    offending: Any = None  # the chunk / body / field value, as parsed
    request: dict[str, Any] | None = None  # method, path, body

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Outcome:
    status: Status
    message: str = ""
    evidence: list[Evidence] = field(default_factory=list)


class CheckFailed(Exception):
    """Raised inside a check to fail it with evidence."""

    def __init__(self, message: str, evidence: list[Evidence] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.evidence = evidence or []


class Skipped(Exception):
    """Raised inside a check that cannot run here (an option not given, a feature
    the server refuses, an answer that leaves nothing to judge); reported as a
    skip, with evidence when the server's answer is the reason."""

    def __init__(self, reason: str, evidence: list[Evidence] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence or []


@dataclass(slots=True)
class CheckResult:
    id: str
    area: str
    level: Level
    description: str
    status: Status
    message: str
    evidence: list[dict[str, Any]]
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["level"] = str(self.level)
        d["status"] = str(self.status)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        return cls(
            id=d["id"],
            area=d.get("area", ""),
            level=Level(d["level"]),
            description=d.get("description", ""),
            status=Status(d["status"]),
            message=d.get("message", ""),
            evidence=list(d.get("evidence", [])),
            duration_s=float(d.get("duration_s", 0.0)),
        )
