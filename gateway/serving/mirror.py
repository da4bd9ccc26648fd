"""The mirror of a rollout: copies of stable requests sent to the candidate, answered
to no one, compared with the stable answer (`MirrorComparison`, to the rollout sink).
A copy runs on its own task, is never charged, never delays or fails the client, and
is bounded per model; its rules: docs/architecture.md, "Rollouts on the request path".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from adapters.base import ErrorEvent, GenerationRequest, Usage
from adapters.errors import GatewayError
from gateway.backends.backend_set import Backend, BackendSet, ModelPool
from gateway.observe.metrics import GatewayMetrics
from gateway.serving.answer_check import AnswerCheck
from gateway.serving.rollout import RolloutRequest, failure_class
from gateway.serving.stream_guard import StreamGuard, guarded
from policies.rollout_assign import mirrored
from policies.rollout_records import MirrorComparison, RolloutSink, TrackRecord

log = logging.getLogger("switchyard.mirror")


@dataclasses.dataclass
class CandidateAnswer:
    check: AnswerCheck
    failure: str | None = None
    usage: Usage | None = None


class Mirror:
    """Every model's mirror copies in this process."""

    def __init__(
        self,
        backends: BackendSet,
        rollouts: RolloutSink,
        metrics: GatewayMetrics,
        draining: Callable[[], bool] = lambda: False,
    ) -> None:
        self.backends = backends
        self.rollouts = rollouts
        self.metrics = metrics
        self.draining = draining
        self.running: dict[str, int] = {}  # model -> copies under way
        self.tasks: set[asyncio.Task] = set()

    def offer(self, requests: list[GenerationRequest], rollout: RolloutRequest) -> None:
        """Copy the request to the candidate when the draw says so and the bound allows;
        returns at once (the copy runs on its own task)."""
        req = requests[0]
        model = req.model
        if rollout.served != "stable" or rollout.fell_back or len(requests) != 1:
            return
        if not mirrored(model, req, rollout.shares) or self.draining():
            return
        pool = self.backends.pools.get(model)
        if pool is None or pool.config.rollout is None:
            return
        if self.running.get(model, 0) >= pool.config.rollout.mirror.max_inflight:
            self._count(model, "dropped")
            return
        copy = dataclasses.replace(
            req,
            request_id=f"{req.request_id}.mirror",
            stream=False,
            include_usage=False,
            sampling=dataclasses.replace(req.sampling, n=1),
            trace_headers=(),
        )
        self.running[model] = self.running.get(model, 0) + 1
        task = asyncio.get_running_loop().create_task(self._copy(pool, copy, rollout))
        self.tasks.add(task)
        task.add_done_callback(self._done(model))
        # The original's client left (no record will come): the copy is of no use.
        rollout.ended.add_done_callback(lambda ended: ended.result() is None and task.cancel())

    def _done(self, model: str) -> Callable[[asyncio.Task], None]:
        def done(task: asyncio.Task) -> None:
            self.tasks.discard(task)
            self.running[model] -= 1
            if not self.running[model]:
                del self.running[model]
            if task.cancelled():
                self._count(model, "cancelled")

        return done

    def cancel_all(self) -> None:
        """The drain: every copy under way ends now."""
        for task in list(self.tasks):
            task.cancel()

    async def _copy(self, pool: ModelPool, copy: GenerationRequest, rollout: RolloutRequest) -> None:
        rollout_cfg = pool.config.rollout
        assert rollout_cfg is not None
        candidates = [b for b in pool.backends if b.config.track == "candidate"]
        routed = pool.order(copy, candidates, "candidate")
        serving = [v.name for v in routed.candidates if v.healthy and not v.ejected]
        if not serving:
            self._count(pool.name, "dropped")
            return
        backend = next(b for b in candidates if b.name == serving[0])
        answer = await candidate_answer(backend, copy)
        stable = await rollout.ended
        if stable is None:
            return  # the original's client left: cancelled by then (`offer`)
        comparison = compare(stable, rollout.check, answer, rollout_cfg.gates.usage_tolerance)
        self.rollouts.compare(pool.name, comparison)
        self._count(pool.name, "compared")

    def _count(self, model: str, result: str) -> None:
        m = self.metrics
        m.mirror_copies.labels(model, result).inc()


async def candidate_answer(backend: Backend, copy: GenerationRequest) -> CandidateAnswer:
    """The candidate's whole answer to `copy`, tallied; a failure as the analysis names
    it ("rejected" for a 4xx the stable answer did not get). Holds one in-flight slot
    of the backend while it runs, as any generation does."""
    answer = CandidateAnswer(AnswerCheck(copy))
    backend.inflight += 1
    agen = backend.adapter.generate(copy)
    try:
        async with asyncio.timeout_at(copy.deadline):
            first = await anext(agen)
            if isinstance(first, ErrorEvent):
                raise first.error
            async for event in guarded(agen, StreamGuard.for_requests([copy], backend.name), first):
                if isinstance(event, ErrorEvent):
                    raise event.error
                if isinstance(event, Usage):
                    answer.usage = event
                answer.check.saw(event)
    except GatewayError as exc:
        answer.failure = failure_class(exc.failure) or "rejected"
    except TimeoutError:
        answer.failure = "timeout"
    except StopAsyncIteration:
        answer.failure = "server_error"  # it ended before saying anything
    except Exception:
        log.exception("a mirror copy to %s failed", backend.name)
        answer.failure = "server_error"
    finally:
        backend.inflight -= 1
        await agen.aclose()  # type: ignore[attr-defined]
    return answer


def compare(
    stable: TrackRecord, stable_check: AnswerCheck, candidate: CandidateAnswer, tolerance: float
) -> MirrorComparison:
    """What differs between the stable answer and the candidate's (both answered):
    the finish reason, the tool calls' names and the candidate's calls' validity, the
    candidate's structured answer's validity, the prompt tokens beyond `tolerance`."""
    differences: list[str] = []
    check = candidate.check
    if stable.failure is None and candidate.failure is None:
        if stable_check.finish_reason != check.finish_reason:
            differences.append(f"finish_reason: {stable_check.finish_reason} != {check.finish_reason}")
        names, theirs = stable_check.call_names(), check.call_names()
        if names != theirs:
            differences.append(f"tool_call: names {names} != {theirs}")
        if check.tool_calls_valid is False:
            differences.append("tool_call: arguments not JSON or no name")
        if check.structured_valid is False:
            differences.append("structured: not schema-valid")
        ours, got = stable.prompt_tokens, candidate.usage.prompt_tokens if candidate.usage else None
        if ours is not None and got is not None and abs(got - ours) > tolerance * max(ours, 1):
            differences.append(f"usage: prompt_tokens {got} != {ours}")
    return MirrorComparison(
        at=time.time(),
        differences=tuple(differences),
        stable_failure=stable.failure,
        candidate_failure=candidate.failure,
    )
