"""Plan validation: a good plan parses; a bad one is refused with the field named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from bakeoff.plan import PlanError, load_plan, parse_plan

ROOT = Path(__file__).resolve().parents[2]

GOOD: dict[str, Any] = {
    "seed": 1,
    "candidates": [
        {"name": "sim", "backend": {"adapter": "vllm"}, "launch": {"kind": "simulator", "simulator": "vllm"}},
        {"name": "remote", "backend": {"adapter": "sglang", "url": "http://10.0.0.5:30000"}},
        {"name": "native", "backend": {"adapter": "native"}, "launch": {"kind": "native"}},
    ],
    "workload": {"generator": {"requests": 10}},
    "slo": {"ttft_ms": 500, "tpot_ms": 50},
}


def _bad(path: str, value: Any) -> dict[str, Any]:
    plan = copy.deepcopy(GOOD)
    node = plan
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return plan


_DELETE = object()


def test_a_good_plan_parses_with_defaults() -> None:
    plan = parse_plan(GOOD)
    assert [c.name for c in plan.candidates] == ["sim", "remote", "native"]
    assert plan.slo.attainment == 0.9 and plan.measure.start_rate == 1.0
    assert plan.candidates[0].backend_config(url="http://127.0.0.1:9")["url"] == "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        (_bad("sedd", 3), "sedd: Extra inputs are not permitted"),
        (
            _bad("candidates.1.backend", {"adapter": "sglang"}),
            "candidates.1: Value error, backend: (top level): Value error, backend 'remote': adapter sglang needs url",
        ),
        (_bad("candidates.1.backend", {"adapter": "sglang", "url": "http://h:1/v1"}), "candidates.1"),
        (
            _bad("candidates.1.backend", {"adapter": "sglang", "url": "http://h:1", "wieght": 2}),
            "wieght: Extra inputs are not permitted",
        ),
        (_bad("candidates.0.backend", {"adapter": "sglang"}), "backend.adapter must be vllm for launch kind simulator"),
        (_bad("candidates.2.launch", {"kind": "simulator"}), "simulator: give it exactly when kind is simulator"),
        (_bad("candidates.1.name", "sim"), "names must be unique (sim repeated)"),
        (_bad("candidates.1.name", "has space"), "candidates.1.name: String should match pattern"),
        (_bad("candidates", []), "candidates: List should have at least 1 item"),
        (_bad("slo", {"ttft_ms": 100, "attainment": 1.0}), "slo.attainment: Input should be less than 1"),
        (_bad("slo", {"error_rate": 0.1}), "give at least one of ttft_ms, tpot_ms, e2e_ms"),
        (
            _bad("workload", {"generator": {"requests": 10}, "trace": {"path": "x", "format": "azure"}}),
            "exactly one of trace, generator",
        ),
        (_bad("workload", {"trace": {"path": "x", "format": "csv"}}), "workload.trace.format: Input should be"),
        (_bad("measure", {"start_rate": 0}), "measure.start_rate: Input should be greater than 0"),
        (_bad("budgets", {"measure": -1}), "budgets.measure"),
        (_bad("workload", _DELETE), "workload: Field required"),
    ],
)
def test_a_bad_plan_names_its_field(plan: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlanError) as err:
        parse_plan(plan)
    assert needle.split(": Value error")[0] in str(err.value)
    assert needle.split("Value error, ")[-1] in str(err.value)


def test_a_plan_that_is_not_a_mapping_or_not_yaml(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="top level must be a mapping"):
        parse_plan(["a"])
    p = tmp_path / "plan.yaml"
    p.write_text("seed: [1, 2\n")
    with pytest.raises(PlanError, match="not YAML"):
        load_plan(p)
    with pytest.raises(PlanError, match="No such file"):
        load_plan(tmp_path / "absent.yaml")


def test_the_worked_example_plan_is_valid() -> None:
    path = ROOT / "examples" / "bakeoff" / "plan.yaml"
    plan = load_plan(path)
    assert len(plan.candidates) >= 3
    assert yaml.safe_load(path.read_text())["seed"] == plan.seed


def test_requirements_reach_the_eliminate_stage_and_only_through_requirements() -> None:
    plan = parse_plan({**GOOD, "requirements": {"features": ["tools", "streaming"], "min_context_tokens": 4096}})
    settings = plan.eliminate_settings()
    assert settings.features == ["tools", "streaming"] and settings.long_context_tokens == 4096
    with pytest.raises(PlanError, match="eliminate.features: give what the workload needs under requirements"):
        parse_plan({**GOOD, "eliminate": {"features": ["tools"]}})
    with pytest.raises(PlanError, match="requirements: profiles: .*unknown conformance profile nope"):
        parse_plan({**GOOD, "requirements": {"conformance_profiles": ["nope"]}})
    with pytest.raises(PlanError, match="requirements.features.0: Input should be"):
        parse_plan({**GOOD, "requirements": {"features": ["telepathy"]}})
