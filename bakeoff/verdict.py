"""What every bake-off stage returns, and what a stage is run against.

A stage (bakeoff/stages/) judges one candidate and answers a `StageResult` of named
`Check`s; the run (bakeoff/run.py) orders the stages, and the report shows failures and
eliminations first. Plain data, so the report and `bakeoff compare` read it back from
the JSON report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

Stage = Literal["eliminate", "comparable", "measure", "production"]
Outcome = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True)
class Check:
    """One named check: `fail` eliminates the candidate (in `eliminate`) or marks it
    (elsewhere); `warn` is reported and ranks it apart (e.g. another quality level);
    `skip` says it could not run and why (`detail`)."""

    name: str
    outcome: Outcome
    detail: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageResult:
    stage: Stage
    candidate: str
    checks: tuple[Check, ...]
    seconds: float = 0.0

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.outcome == "fail")

    @property
    def passed(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageResult:
        checks = tuple(Check(**c) for c in data["checks"])
        return cls(stage=data["stage"], candidate=data["candidate"], checks=checks, seconds=data.get("seconds", 0.0))


class Instance(Protocol):
    """A runtime instance started for a check: its URL, and how to stop it (idempotent)."""

    url: str

    def stop(self) -> None: ...


@dataclass(frozen=True)
class CandidateTarget:
    """A candidate as the stages reach it: its own gateway (`gateway_url`, serving
    `model` from this candidate's backends only), with `api_key` for the API and
    `admin_key` for `POST /admin/reload` of `config_path`; `runtime_url` is the runtime
    itself (its own metrics, `/props`, `/info`), None for the in-process native engine;
    `runtime` the adapter kind (native, vllm, sglang, tgi, trtllm, llamacpp)."""

    name: str
    runtime: str
    gateway_url: str
    model: str
    api_key: str | None = None
    admin_key: str | None = None
    config_path: str | None = None
    runtime_url: str | None = None
    # Starts another instance of the candidate's runtime (the same recipe, its own port),
    # for the production stage's `replicas` check; None: none can be started (the native
    # engine runs in the gateway; a runtime reached at its URL has no recipe).
    replica: Callable[[], Instance] | None = field(default=None, compare=False, repr=False)
