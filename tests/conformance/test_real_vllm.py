"""The slow tier (`make test-vllm`): a real vLLM CPU server, directly and
through the gateway. Through the gateway every core MUST passes; directly,
the suite sees vLLM's own deviations, which is what the gateway normalizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.real_vllm import VLLM_PYTHON, run_real_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]


def test_real_vllm_directly_and_through_the_gateway(tmp_path: Path) -> None:
    assert VLLM_PYTHON.exists(), "run scripts/install-vllm.sh (make test-vllm does) first"
    matrix = run_real_vllm(tmp_path / "report", None, ["core"])
    runs = {target.name: {r.id: r for r in run.results} for target, run in matrix.runs}
    gateway, direct = runs["gateway/tiny"], runs["vllm-cpu (direct vllm)"]
    assert [r.id for r in gateway.values() if r.level == "MUST" and r.status in ("fail", "error")] == []
    # vLLM's error `code` is an integer; the gateway's envelope has a string code.
    assert direct["errors.envelope"].status == "fail" and gateway["errors.envelope"].status == "pass"
    # vLLM has no GET /v1/models/{id}; the gateway serves it.
    assert direct["models.retrieve"].status == "fail" and gateway["models.retrieve"].status == "pass"
    assert (tmp_path / "report" / "matrix.html").exists()
