"""The rollout controller: the request path's `RolloutSink` and the task that decides.

`record` and `compare` are buffered (bounded) and pushed to the shared store every tick;
`shares` is the state this replica last read (fail static while the store is down). The
task, every `tick_s`, per model under rollout: push the records, read the state (a new
rollout id is a fresh `pending` rollout), start or preflight it, and, holding the judging
lease, judge the newest closed window once (policies/rollout.py) and apply the transition
by compare-and-set, as operator actions (`act`) are: docs/rollouts.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from gateway.config.schema import GatewayConfig
from gateway.observe.rollout_metrics import RolloutMetrics
from policies.quota_health import stop_task
from policies.rollout import analyse
from policies.rollout_records import NO_ROLLOUT, MirrorComparison, TrackRecord, TrackShares
from policies.rollout_state import (
    Emitted,
    Plan,
    PlanSettings,
    RolloutState,
    TransitionRefused,
    act,
    preflight_done,
    shares,
)
from policies.rollout_state import window_closed as judge_window
from stores.rollout_memory import MemoryRolloutStore
from stores.rollout_redis import RedisRolloutStore
from stores.rollout_store import RECORDS_MAX, RolloutStore, RolloutStoreUnavailable

log = logging.getLogger("switchyard.rollout")
BUFFER_MAX = 4 * RECORDS_MAX  # records one replica holds for one model between pushes
PREFLIGHT_LEASE_S = 120.0  # a preflight holds the judging lease this long at most
Preflight = Callable[[str], Awaitable[tuple[str, ...]]]  # model -> the MUST checks that failed


class UnknownRollout(KeyError):
    """No rollout is configured for the model (a 404 at the admin API)."""


class RolloutController:
    def __init__(
        self,
        store: RolloutStore,
        plans: Callable[[], Mapping[str, Plan]],
        metrics: RolloutMetrics,
        *,
        tick_s: float = 0.25,
        clock: Callable[[], float] = time.time,
        replica: str | None = None,
        preflight: Preflight | None = None,
    ) -> None:
        self.store = store
        self.plans = plans
        self.metrics = metrics
        self.tick_s = tick_s
        self.clock = clock
        self.replica = replica or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.preflight = preflight
        self._states: dict[str, RolloutState] = {}
        self._records: dict[str, deque[TrackRecord]] = {}
        self._comparisons: dict[str, deque[MirrorComparison]] = {}
        self._preflights: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._down: set[str] = set()  # models whose last store call failed (logged once)

    # -- the request path's sink -------------------------------------------------------

    def record(self, model: str, record: TrackRecord) -> None:
        if self._judging(model):
            self._records.setdefault(model, deque(maxlen=BUFFER_MAX)).append(record)

    def compare(self, model: str, comparison: MirrorComparison) -> None:
        if self._judging(model):
            self._comparisons.setdefault(model, deque(maxlen=BUFFER_MAX)).append(comparison)

    def _judging(self, model: str) -> bool:
        """Records are kept only while a step runs: no window is judged otherwise."""
        state = self._states.get(model)
        return state is not None and state.phase == "step" and model in self.plans()

    def shares(self, model: str) -> TrackShares:
        plan = self.plans().get(model)
        if plan is None:
            return NO_ROLLOUT
        return shares(plan, self._states.get(model))

    # -- the task --------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="rollout-controller")

    async def aclose(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
        for task in self._preflights.values():
            await stop_task(task)
        await self.store.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # a bug must not stop every later decision: logged, next tick
                log.exception("rollout tick failed")
            await asyncio.sleep(self.tick_s)

    async def tick(self) -> None:
        plans = self.plans()
        for model in [m for m in self._states if m not in plans]:
            del self._states[model]
        for model, plan in plans.items():
            try:
                await self._tick_model(model, plan)
            except RolloutStoreUnavailable as exc:
                self.metrics.store_errors.labels(model).inc()
                if model not in self._down:
                    self._down.add(model)
                    log.warning("rollout store unavailable for %s, keeping the last shares: %s", model, exc)
            else:
                if model in self._down:
                    self._down.discard(model)
                    log.info("rollout store back for %s", model)

    async def _tick_model(self, model: str, plan: Plan) -> None:
        await self._push(model, plan)
        now = self.clock()
        state = self._keep(model, plan, await self.store.ensure(model, plan.rollout_id, now))
        if state.phase == "pending" and plan.auto_start:
            await self._apply(model, plan, state, *act(plan, state, "start", now, "started by the config"))
            return
        if state.phase == "preflight":
            self._run_preflight(model, plan, state)
            return
        if state.phase != "step":
            return
        grace = max(0.5, 3 * self.tick_s)
        window = int((now - grace) // plan.window_s) - 1
        if window <= state.window or not await self.store.lease(model, self.replica, 4 * self.tick_s + grace):
            return
        got = await self.store.window(model, plan.rollout_id, window)
        verdict = analyse(
            got.records, got.comparisons, plan.gates, mirror_on=plan.mirror.share > 0, min_samples=plan.min_samples
        )
        new, events = judge_window(plan, state, window, verdict, now)
        if not await self._apply(model, plan, state, new, events):
            return
        decision = "pause" if new.phase == "paused" else verdict.decision
        self.metrics.judged(model, verdict, decision)
        evidence = {"window": window, "at": now, "step": state.step, "share": shares(plan, state).candidate}
        await self.store.put_evidence(model, plan.rollout_id, {**evidence, **verdict.to_dict(), "decision": decision})

    async def _push(self, model: str, plan: Plan) -> None:
        records, comparisons = self._records.get(model), self._comparisons.get(model)
        if not records and not comparisons:
            return
        taken_r, taken_c = list(records or ()), list(comparisons or ())
        for buffer in (records, comparisons):
            if buffer is not None:
                buffer.clear()
        windows: dict[int, tuple[list[TrackRecord], list[MirrorComparison]]] = {}
        for r in taken_r:
            windows.setdefault(int(r.at // plan.window_s), ([], []))[0].append(r)
        for c in taken_c:
            windows.setdefault(int(c.at // plan.window_s), ([], []))[1].append(c)
        try:
            for window, (rs, cs) in sorted(windows.items()):
                await self.store.push(model, plan.rollout_id, window, plan.window_s, rs, cs)
        except RolloutStoreUnavailable:
            # keep them for the next push (bounded: the oldest go first)
            self._records.setdefault(model, deque(maxlen=BUFFER_MAX)).extendleft(reversed(taken_r))
            self._comparisons.setdefault(model, deque(maxlen=BUFFER_MAX)).extendleft(reversed(taken_c))
            raise

    def _keep(self, model: str, plan: Plan, state: RolloutState) -> RolloutState:
        self._states[model] = state
        self.metrics.show(model, plan, state)
        return state

    async def _apply(
        self, model: str, plan: Plan, state: RolloutState, new: RolloutState, events: list[Emitted]
    ) -> bool:
        """Store `new` if `state` is still current; emit its events once it landed."""
        if new == state:
            return False
        if not await self.store.swap(model, state.version, new):
            latest = await self.store.load(model)
            if latest is not None:
                self._keep(model, plan, latest)
            return False
        self._keep(model, plan, new)
        for event in events:
            log.info(
                orjson.dumps(
                    {
                        "event": f"rollout_{event.kind}",
                        "model": model,
                        "rollout_id": plan.rollout_id,
                        "step": event.step,
                        "share": event.share,
                        "reason": event.reason,
                        "version": new.version,
                        "replica": self.replica,
                    }
                ).decode()
            )
        return True

    def _run_preflight(self, model: str, plan: Plan, state: RolloutState) -> None:
        running = self._preflights.get(model)
        if running is not None and not running.done():
            return
        self._preflights[model] = asyncio.create_task(self._preflight(model, plan, state), name=f"preflight-{model}")

    async def _preflight(self, model: str, plan: Plan, state: RolloutState) -> None:
        if not await self.store.lease(model, self.replica, PREFLIGHT_LEASE_S):
            return
        if self.preflight is None:
            failed: tuple[str, ...] = ("preflight runner: none configured for this gateway",)
        else:
            try:
                failed = await self.preflight(model)
            except Exception as exc:  # the runner itself broke: the rollout is refused, saying so
                log.exception("preflight of %s failed to run", model)
                failed = (f"preflight: could not run: {type(exc).__name__}: {exc}"[:300],)
        try:
            await self._apply(model, plan, state, *preflight_done(plan, state, failed, self.clock()))
        except (RolloutStoreUnavailable, TransitionRefused) as exc:
            log.warning("preflight result for %s not applied: %s", model, exc)

    # -- operator actions (the admin API) ------------------------------------------------

    async def act(self, model: str, action: str, who: str) -> RolloutState:
        """Apply an operator action; raises UnknownRollout, TransitionRefused or
        RolloutStoreUnavailable. Retried when a window's decision landed first."""
        plan = self.plans().get(model)
        if plan is None:
            raise UnknownRollout(model)
        for _ in range(5):
            state = self._keep(model, plan, await self.store.ensure(model, plan.rollout_id, self.clock()))
            new, events = act(plan, state, action, self.clock(), f"{action} by {who}")
            if await self._apply(model, plan, state, new, events):
                self.metrics.actions.labels(model, action).inc()
                return new
        raise RolloutStoreUnavailable("the rollout kept changing under the action: try again")

    async def status(self, model: str) -> dict[str, Any]:
        """The state, the shares and the last windows' evidence."""
        plan = self.plans().get(model)
        if plan is None:
            raise UnknownRollout(model)
        state = self._keep(model, plan, await self.store.ensure(model, plan.rollout_id, self.clock()))
        now = shares(plan, state)
        return {
            "model": model,
            "state": state.to_dict(),
            "candidate_share": now.candidate,
            "mirror_share": now.mirror,
            "steps": list(plan.steps),
            "window_s": plan.window_s,
            "evidence": await self.store.evidence(model, plan.rollout_id),
        }

    def summary(self) -> list[dict[str, Any]]:
        """Every configured rollout as this replica last read it (no store call)."""
        out = []
        for model, plan in sorted(self.plans().items()):
            state = self._states.get(model)
            now = shares(plan, state)
            phase = state.phase if state else "unknown"
            step = state.step if state else None
            out.append(
                {
                    "model": model,
                    "rollout_id": plan.rollout_id,
                    "phase": phase,
                    "step": step,
                    "candidate_share": now.candidate,
                    "mirror_share": now.mirror,
                }
            )
        return out


def rollout_store(config: GatewayConfig) -> RolloutStore:
    """The shared store: the quota store's Redis deployment when it has one (every
    replica already reaches it), else this process's memory (one replica)."""
    store = config.quota_store
    if store.kind == "redis":
        return RedisRolloutStore(store.redis_target(), key_prefix=store.key_prefix, timeout_s=store.timeout_s)
    return MemoryRolloutStore()


def workers_warning(config: GatewayConfig) -> str | None:
    """What `serve` says at start when several workers would each keep their own rollout."""
    rolled = sorted(name for name, model in config.models.items() if getattr(model, "rollout", None) is not None)
    if config.workers < 2 or config.quota_store.kind != "memory" or not rolled:
        return None
    return (
        f"{config.workers} workers, and the rollout state is in memory: each worker runs its own rollout of "
        f"{', '.join(rolled)} (its own steps and decisions); set quota_store to redis to share one"
    )


def plans_of(config: GatewayConfig) -> dict[str, Plan]:
    """The rollout of each model whose config has a `rollout:` block. Its id is a digest of
    the block and of the model's candidate backends: the same after a reload or a restart
    is the same rollout; a changed block or candidate is a new rollout (a stable backend's
    change is not)."""
    plans: dict[str, Plan] = {}
    for name, model in config.models.items():
        block = getattr(model, "rollout", None)
        if block is None:
            continue
        data = block.model_dump(mode="json")
        backends = [b.model_dump(mode="json") for b in model.backends if getattr(b, "track", "") == "candidate"]
        rollout_id = hashlib.sha256(orjson.dumps([data, backends], option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]
        plans[name] = Plan(rollout_id=rollout_id, **{k: getattr(block, k) for k in PlanSettings.model_fields})
    return plans
