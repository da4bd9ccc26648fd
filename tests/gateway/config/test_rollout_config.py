"""A model's rollout block as the config reads it (gateway/config/rollout.py): its
defaults, a valid fleet of two tracks, the gates set field by field, a mirror-only first step,
and the plans and shares the rollout controller makes of it (gateway/lifecycle/rollout.py),
a reload included."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.config.schema import parse_config
from gateway.lifecycle.rollout import RolloutController, plans_of
from gateway.observe.rollout_metrics import RolloutMetrics
from policies.rollout import GateLimits
from policies.rollout_records import NO_ROLLOUT, TrackShares
from policies.rollout_state import DEFAULT_STEPS
from stores.rollout_memory import MemoryRolloutStore

VLLM = {"adapter": "vllm", "url": "http://127.0.0.1:8000"}


def fleet(**rollout) -> dict:
    backends = [{"name": "old", **VLLM}, {"name": "new", **VLLM, "track": "candidate"}]
    return {"models": {"m": {"backends": backends, "rollout": rollout}, "plain": {"backends": [{"name": "p", **VLLM}]}}}


def test_a_rollout_block_takes_its_defaults():
    config = parse_config(fleet())
    rollout = config.models["m"].rollout
    assert rollout is not None
    assert rollout.steps == DEFAULT_STEPS and rollout.sticky == ["session"]
    assert rollout.mirror.share == 0.0 and rollout.mirror.max_inflight == 8
    assert rollout.window_s == 60.0 and rollout.min_samples == 20
    assert rollout.auto_start and not rollout.preflight
    assert rollout.gates == GateLimits()
    assert [b.track for b in config.models["m"].backends] == ["stable", "candidate"]
    assert config.models["plain"].rollout is None and config.models["plain"].backends[0].track == "stable"


def test_the_gates_are_set_field_by_field():
    gates = (
        parse_config(fleet(gates={"ttft_p95_ratio_max": 2.0, "error_rate_max_delta": 0.0})).models["m"].rollout.gates
    )
    assert gates.ttft_p95_ratio_max == 2.0 and gates.error_rate_max_delta == 0.0
    assert gates.itl_p95_ratio_max == GateLimits().itl_p95_ratio_max


def test_a_first_step_of_zero_is_a_mirror_only_step():
    rollout = parse_config(fleet(steps=[0, 0.5], mirror={"share": 1.0})).models["m"].rollout
    assert rollout is not None and rollout.steps == (0, 0.5) and rollout.mirror.share == 1.0


async def started(config_data: dict) -> tuple[RolloutController, dict]:
    holder = {"plans": plans_of(parse_config(config_data))}
    controller = RolloutController(MemoryRolloutStore(), lambda: holder["plans"], RolloutMetrics(CollectorRegistry()))
    await controller.tick()
    return controller, holder


async def test_each_model_under_rollout_starts_at_its_first_step_and_a_changed_block_anew():
    controller, holder = await started(fleet(steps=[0.1, 1.0], mirror={"share": 0.2}))
    assert controller.shares("m") == TrackShares(0.1, 0.2)
    assert controller.shares("plain") == NO_ROLLOUT and controller.shares("unknown") == NO_ROLLOUT
    holder["plans"] = plans_of(parse_config(fleet(steps=[0.1, 1.0], mirror={"share": 0.2})))
    await controller.tick()
    assert controller.shares("m") == TrackShares(0.1, 0.2)  # the same block: the same rollout
    holder["plans"] = plans_of(parse_config(fleet(steps=[0.3, 1.0])))
    await controller.tick()
    assert controller.shares("m") == TrackShares(0.3, 0.0)


async def test_the_controller_serves_a_mirror_only_first_step():
    controller, _ = await started(fleet(steps=[0, 0.5], mirror={"share": 1.0}))
    assert controller.shares("m") == TrackShares(0.0, 1.0)


def test_the_plan_carries_the_gates_window_and_options():
    plan = plans_of(
        parse_config(
            fleet(steps=[0.5, 1.0], window_s=2, min_samples=7, auto_start=False, gates={"ttft_p95_ratio_max": 2.0})
        )
    )["m"]
    assert plan.steps == (0.5, 1.0) and not plan.auto_start
    assert plan.window_s == 2 and plan.min_samples == 7 and plan.gates.ttft_p95_ratio_max == 2.0
    other = plans_of(parse_config(fleet(steps=[0.5, 1.0], window_s=3)))["m"]
    assert other.rollout_id != plan.rollout_id


def test_several_workers_with_the_rollout_in_memory_are_warned():
    from gateway.lifecycle.rollout import workers_warning

    assert "each worker runs its own rollout of m" in workers_warning(parse_config({**fleet(), "workers": 2}))
    assert workers_warning(parse_config(fleet())) is None
    shared = {**fleet(), "workers": 2, "quota_store": {"kind": "redis", "url": "redis://127.0.0.1:6379/0"}}
    assert workers_warning(parse_config(shared)) is None
