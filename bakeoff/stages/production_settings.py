"""The production stage's settings (its section of the plan) and check names, apart from
the checks so that each check's module can read them (bakeoff/stages/production.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bakeoff.stages import StageSettings

CheckName = Literal["cancel", "deadline", "overload", "readiness", "rollback", "replicas", "quota"]
ALL_CHECKS: tuple[CheckName, ...] = ("cancel", "deadline", "overload", "readiness", "rollback", "replicas", "quota")


class Settings(StageSettings):
    checks: list[CheckName] = Field(default_factory=lambda: list(ALL_CHECKS))
    cancel_streams: int = Field(3, ge=1, le=64)
    answer_tokens: int = Field(512, ge=16)  # the long answers that are cut (cancel, deadline)
    settle_s: float = Field(10.0, gt=0)  # time for the counts to come back after a cut
    deadline_s: float = Field(0.5, gt=0)
    overload_requests: int = Field(64, ge=2, le=4096)
    overload_tokens: int = Field(64, ge=1)  # each answer of the burst (ignore_eos where taken)
    request_timeout_s: float = Field(30.0, gt=0)  # past it a request of the burst is a hang
    readyz_timeout_s: float = Field(2.0, gt=0)
    rollback_config: str | None = None  # the config to roll back to; None: the backends renamed
    rollback_clients: int = Field(4, ge=1, le=64)
    rollback_hold_s: float = Field(1.0, ge=0)  # traffic kept on the rolled-back config
    replica_requests: int = Field(16, ge=2, le=1024)  # spread over the two instances, one session each
    session_requests: int = Field(6, ge=2, le=256)  # one session's requests, which must keep one instance
    failover_hold_s: float = Field(3.0, gt=0)  # traffic kept after the second instance is stopped
    quota_rpm: int = Field(3, ge=1)  # the limited tenant's requests_per_minute
    quota_requests: int = Field(6, ge=2, le=256)  # sent by each of the two tenants
