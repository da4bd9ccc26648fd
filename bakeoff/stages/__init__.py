"""The bake-off's stages, in the order bakeoff/run.py runs them: `eliminate`,
`comparable`, `measure` (bakeoff/stages/measure.py: the workload and the knee) and
`production`. Each module has a strict `Settings` (its section of the plan) and
`async run(target, settings, budget_s) -> StageResult` (`comparable.run` also takes the
reference candidate, `measure.run` the workload and SLOs). A stage judges a candidate from
outside, through its gateway (and the runtime's own metrics), never in process.

What they share is here: the HTTP client on a candidate's gateway (`Probe`) and the
stage's time (`Budget`), which turns a check that cannot finish into a `skip` saying so,
never a hang.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from bakeoff.verdict import CandidateTarget, Check

# A check that needs less than this is not started once the budget is nearly spent.
MIN_CHECK_S = 0.5


class StageSettings(BaseModel):
    """A stage's plan section: unknown keys are errors (a typo must not turn a check off)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget:
    """The seconds a stage may take, shared among the checks still to run."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + max(0.0, seconds)

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def share(self, checks_left: int) -> float:
        """An even share of what is left for the next check (the rest keeps what it saves)."""
        return self.left() / max(1, checks_left)


async def bounded(name: str, judge: Callable[[], Awaitable[Check]], seconds: float) -> Check:
    """`judge()` within `seconds`: a `skip` naming the time when it cannot finish, a `fail`
    when the candidate's gateway cannot be reached (it cannot serve) or answers a body
    that is not the JSON asked for."""
    if seconds < MIN_CHECK_S:
        return Check(name, "skip", f"not run: the stage's time budget was spent ({seconds:.1f} s left)")
    try:
        async with asyncio.timeout(seconds):
            return await judge()
    except TimeoutError:
        return Check(name, "skip", f"could not finish within its {seconds:.1f} s of the stage's budget")
    except httpx.TransportError as exc:
        return Check(name, "fail", f"the candidate did not answer: {type(exc).__name__}: {exc}")
    except ValueError as exc:  # json.JSONDecodeError among them
        return Check(name, "fail", f"the candidate answered a body that is not the JSON asked for: {exc}")


class Probe:
    """Requests to one candidate's gateway with its API key (`admin` for the admin API)."""

    def __init__(self, target: CandidateTarget, timeout_s: float = 60.0) -> None:
        self.target = target
        headers = {"authorization": f"Bearer {target.api_key}"} if target.api_key else {}
        self.client = httpx.AsyncClient(
            base_url=target.gateway_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
        )

    async def post(self, path: str, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
        return await self.client.post(path, json={"model": self.target.model, **body}, **kwargs)

    async def chat(self, messages: list[dict[str, Any]], **fields: Any) -> httpx.Response:
        return await self.post("/v1/chat/completions", {"messages": messages, **fields})

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.target.admin_key}"}

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> Probe:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def error_text(resp: httpx.Response) -> str:
    """`HTTP 400: <the error envelope's message>` (or the body's start), for a check's detail."""
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text[:200]
    return f"HTTP {resp.status_code}: {message}"


def first_choice(resp: httpx.Response) -> dict[str, Any]:
    """The first choice of a 200 chat answer ({} when it has none)."""
    try:
        choices = resp.json().get("choices") or [{}]
    except ValueError:
        return {}
    first = choices[0]
    return first if isinstance(first, dict) else {}


def usage_of(resp: httpx.Response) -> dict[str, Any]:
    try:
        usage = resp.json().get("usage")
    except ValueError:
        return {}
    return usage if isinstance(usage, dict) else {}
