"""What the command writes and starts for a candidate: the plan's admission queue reaches
every candidate's gateway config (so the overload check can overflow it), and a candidate
whose runtime is not installed here is skipped with the reason, not failed or crashed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff import launch
from bakeoff.decision import paragraph, standing
from bakeoff.plan import parse_plan
from bakeoff.report import blocks, markdown
from bakeoff.run import run_plan
from gateway.config.schema import GatewayConfig

PLAN = {
    "seed": 1,
    "model": "m",
    "candidates": [
        {"name": "cpu", "backend": {"adapter": "vllm", "max_inflight": 4}, "launch": {"kind": "vllm_cpu"}},
        {"name": "gguf", "backend": {"adapter": "llamacpp"}, "launch": {"kind": "llamacpp"}},
    ],
    "workload": {"generator": {"requests": 4}},
    "slo": {"ttft_ms": 500},
}


def test_the_plans_admission_queue_is_written_into_each_gateway_config() -> None:
    plan = parse_plan({**PLAN, "admission": {"max_queue": 3, "full_status": 503}})
    backend = plan.candidates[0].backend_config(url="http://127.0.0.1:9")
    config = launch.gateway_config(plan, backend, 8080, "sk-admin", {"acme": "sk-a"})
    parsed = GatewayConfig.model_validate(config)  # what the gateway itself will load
    assert parsed.admission.max_queue == 3 and parsed.admission.full_status == 503
    default = launch.gateway_config(parse_plan(PLAN), backend, 8080, "sk-admin", {"acme": "sk-a"})
    assert "admission" not in default  # absent: the gateway's own defaults


def test_a_bad_admission_queue_is_refused_with_its_field() -> None:
    with pytest.raises(ValueError, match="admission.max_queue"):
        parse_plan({**PLAN, "admission": {"max_queue": -1}})


async def test_a_runtime_not_installed_is_skipped_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "VLLM_PYTHON", tmp_path / "no-venv-vllm" / "python")
    monkeypatch.setattr(launch, "LLAMA_SERVER", tmp_path / "no-llama-server")
    monkeypatch.setattr(launch, "model_dir", lambda model: tmp_path)  # no weights are built for nothing
    plan = parse_plan(PLAN)
    doc = await run_plan(plan, "plan", tmp_path, progress=False)
    by = {c["name"]: c for c in doc["candidates"]}
    assert [by[n]["status"] for n in ("cpu", "gguf")] == ["skipped", "skipped"]
    assert "scripts/install-vllm.sh" in by["cpu"]["error"] and by["cpu"]["stages"] == []
    assert "scripts/install-llamacpp.sh" in by["gguf"]["error"]
    assert standing(by["cpu"]) == "skipped"
    assert "cpu was skipped: cpu: vLLM's CPU build is not installed" in paragraph(doc)
    md = markdown(blocks(doc, []))
    assert "| cpu | start | skip |" in md
