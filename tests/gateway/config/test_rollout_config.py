"""A model's rollout block as the config reads it (gateway/config/rollout.py): its
defaults, a valid fleet of two tracks, the gates set field by field, a mirror-only first step."""

from __future__ import annotations

from gateway.config.rollout import DEFAULT_STEPS, RolloutGates
from gateway.config.schema import parse_config

VLLM = {"adapter": "vllm", "url": "http://127.0.0.1:8000"}


def fleet(**rollout) -> dict:
    backends = [{"name": "old", **VLLM}, {"name": "new", **VLLM, "track": "candidate"}]
    return {"models": {"m": {"backends": backends, "rollout": rollout}, "plain": {"backends": [{"name": "p", **VLLM}]}}}


def test_a_rollout_block_takes_its_defaults():
    config = parse_config(fleet())
    rollout = config.models["m"].rollout
    assert rollout is not None
    assert tuple(rollout.steps) == DEFAULT_STEPS and rollout.sticky == ["session"]
    assert rollout.mirror.share == 0.0 and rollout.mirror.max_inflight == 8
    assert rollout.window_s == 60.0 and rollout.min_samples == 20
    assert rollout.auto_start and not rollout.preflight
    assert rollout.gates == RolloutGates()
    assert [b.track for b in config.models["m"].backends] == ["stable", "candidate"]
    assert config.models["plain"].rollout is None and config.models["plain"].backends[0].track == "stable"


def test_the_gates_are_set_field_by_field():
    gates = (
        parse_config(fleet(gates={"ttft_p95_ratio_max": 2.0, "error_rate_max_delta": 0.0})).models["m"].rollout.gates
    )
    assert gates.ttft_p95_ratio_max == 2.0 and gates.error_rate_max_delta == 0.0
    assert gates.itl_p95_ratio_max == RolloutGates().itl_p95_ratio_max


def test_a_first_step_of_zero_is_a_mirror_only_step():
    rollout = parse_config(fleet(steps=[0, 0.5], mirror={"share": 1.0})).models["m"].rollout
    assert rollout is not None and rollout.steps == [0, 0.5] and rollout.mirror.share == 1.0
