"""The command line's exit codes against real simulator processes: 0 PASS,
1 a MUST failed, 3 INCOMPLETE (0 with --allow-incomplete), 2 a usage error in
one line; and the declarations (--capabilities, --sim-faults) that turn checks
which cannot apply into `na` instead of false failures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import EXIT_INCOMPLETE, EXIT_MUST_FAILED, EXIT_OK, EXIT_USAGE, main
from simulators.testing import start_simulator


@pytest.fixture(scope="module")
def vllm_sim() -> Iterator[str]:
    with start_simulator("vllm", model_name="sim-model") as sim:
        yield sim.url


def run(url: str, report: Path, *args: str) -> tuple[int, dict]:
    code = main(
        ["conformance", "run", "--base-url", url, "--model", "sim-model", "--report", str(report), "--quiet", *args]
    )
    path = report / "report.json"
    return code, json.loads(path.read_text()) if path.exists() else {}


def statuses(data: dict) -> dict[str, str]:
    return {r["id"]: r["status"] for r in data["results"]}


def test_pass_fail_and_incomplete_exit_codes(vllm_sim: str, tmp_path: Path) -> None:
    code, data = run(vllm_sim, tmp_path / "pass", "--only", "models.list")
    assert (code, data["verdict"]) == (EXIT_OK, "PASS")

    # vLLM's error code is an integer: a MUST failure.
    code, data = run(vllm_sim, tmp_path / "fail", "--only", "models.list", "--only", "errors.envelope")
    assert (code, data["verdict"]) == (EXIT_MUST_FAILED, "FAIL")

    # Auth checks without --api-key cannot run: skipped MUSTs make the run incomplete.
    only = ["--only", "models.list", "--only", "gateway.auth_"]
    code, data = run(vllm_sim, tmp_path / "incomplete", *only)
    assert (code, data["verdict"]) == (EXIT_INCOMPLETE, "INCOMPLETE")
    skipped = {k: v for k, v in statuses(data).items() if v != "pass"}
    assert skipped == {"gateway.auth_missing_401": "skip", "gateway.auth_bad_401": "skip"}
    assert "**INCOMPLETE**" in (tmp_path / "incomplete" / "report.md").read_text()
    code, data = run(vllm_sim, tmp_path / "allowed", *only, "--allow-incomplete")
    assert (code, data["verdict"]) == (EXIT_OK, "INCOMPLETE")  # allowed, and still reported as such


def test_a_check_the_target_cannot_do_is_not_applicable(tmp_path: Path) -> None:
    only = ["--only", "models.list", "--only", "structured.json_schema"]
    with start_simulator("tgi", model_name="sim-model") as tgi:
        # TGI refuses OpenAI's response_format (its grammar is {type, value}): undeclared,
        # the check runs and fails...
        code, data = run(tgi.url, tmp_path / "undeclared", *only)
        assert code == EXIT_MUST_FAILED and statuses(data)["structured.json_schema"] == "fail"
        # ... declared without structured output, it does not apply.
        code, data = run(tgi.url, tmp_path / "declared", *only, "--capabilities", "tools")
    assert code == EXIT_OK and statuses(data)["structured.json_schema"] == "na"
    assert data["target"]["capabilities"] == ["tools"]


def test_fault_checks_need_a_declared_simulator(vllm_sim: str, tmp_path: Path) -> None:
    only = ["--only", "models.list", "--only", "faults.missing_done"]
    code, data = run(vllm_sim, tmp_path / "plain", *only)
    assert code == EXIT_OK and statuses(data)["faults.missing_done"] == "na"
    # Declared: the marker reaches the simulator, whose stream then lacks [DONE] (vLLM's own shape).
    code, data = run(vllm_sim, tmp_path / "sim", *only, "--sim-faults")
    assert code == EXIT_MUST_FAILED and statuses(data)["faults.missing_done"] == "fail"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "nope"], "unknown profile 'nope'"),
        (["--capabilities", "tools,grammar"], "--capabilities: unknown capability grammar"),
        (["--only", "no.such.check"], "no checks selected"),
    ],
)
def test_run_usage_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _ = run("http://127.0.0.1:9", tmp_path, *args)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_diff_of_a_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "cannot read" in err and "a.json" in err and len(err.strip().splitlines()) == 1
