"""Real runs on loopback processes: the core profile through the gateway (the
native engine on the built-in tiny model) must pass every MUST; run directly
against runtime simulators, the suite must catch their known deviations (so a
pass is not a check that cannot fail)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.catalog import select
from conformance.cli import main
from conformance.procs import SWITCHYARD, ManagedProcess, free_port
from conformance.result import Status
from conformance.runner import run_checks
from conformance.target import Target


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("conformance-procs")


@pytest.fixture(scope="module")
def native_gateway(logs: Path) -> Iterator[ManagedProcess]:
    port = free_port()
    p = ManagedProcess(
        "gateway", [*SWITCHYARD, "serve", "--port", str(port)], f"http://127.0.0.1:{port}", logs / "gateway.log"
    )
    try:
        yield p.wait_ready("/healthz", timeout_s=120)
    finally:
        p.stop()


def simulator(kind: str, logs: Path, *flags: str) -> ManagedProcess:
    port = free_port()
    p = ManagedProcess(
        f"sim-{kind}",
        [*SWITCHYARD, "simulate", kind, "--port", str(port), "--model-name", "sim-model", *flags],
        f"http://127.0.0.1:{port}",
        logs / f"sim-{kind}.log",
    )
    return p.wait_ready("/health", timeout_s=60)


def run_cli(base_url: str, model: str, report_dir: Path, *options: str) -> tuple[int, dict]:
    """`switchyard conformance run` against `base_url`, quiet: its exit code and report.json."""
    argv = ["conformance", "run", "--base-url", base_url, "--model", model, *options]
    code = main([*argv, "--report", str(report_dir), "--quiet"])
    return code, json.loads((report_dir / "report.json").read_text())


@pytest.fixture(scope="module")
def vllm_sim(logs: Path) -> Iterator[ManagedProcess]:
    p = simulator("vllm", logs, "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def tgi_sim(logs: Path) -> Iterator[ManagedProcess]:
    p = simulator("tgi", logs)
    yield p
    p.stop()


def test_core_profile_through_the_gateway_passes_every_must(native_gateway: ManagedProcess, tmp_path: Path) -> None:
    code, data = run_cli(native_gateway.url, "tiny", tmp_path, "--profile", "core")
    failing = [
        (r["id"], r["message"]) for r in data["results"] if r["level"] == "MUST" and r["status"] in ("fail", "error")
    ]
    assert failing == [] and code == 0
    passed = sum(1 for r in data["results"] if r["status"] == "pass")
    assert passed >= 40  # the core profile really ran, not a handful of checks
    assert (tmp_path / "report.md").exists() and (tmp_path / "report.html").exists()


async def test_vllm_wire_deviations_are_caught(vllm_sim: ManagedProcess) -> None:
    report = await run_checks(
        Target(vllm_sim.url, "sim-model"),
        select(None, ["errors.envelope", "models.retrieve", "stream.", "chat.response.schema"]),
        [],
    )
    status = {r.id: r for r in report.results}
    # vLLM's error code is the integer HTTP status, not a string: a spec deviation.
    assert status["errors.envelope"].status is Status.FAIL
    assert any("error.code" in e["where"] for e in status["errors.envelope"].evidence)
    assert status["models.retrieve"].status is Status.FAIL  # vLLM has no GET /v1/models/{id}
    # ... while its stream framing and chunk shapes are OpenAI's.
    for cid in ("stream.framing", "stream.chunk_schema", "stream.role_and_finish", "chat.response.schema"):
        assert status[cid].status is Status.PASS, status[cid].message


async def test_tgi_wire_deviations_are_caught(tgi_sim: ManagedProcess) -> None:
    report = await run_checks(
        Target(tgi_sim.url, "sim-model"),
        select(None, ["stream.role_and_finish", "chat.response.id_prefix", "models.unknown_model_404", "n.nonstream"]),
        [],
    )
    status = {r.id: r.status for r in report.results}
    assert status == {  # TGI: role in every chunk, empty id, any model accepted, n ignored
        "stream.role_and_finish": Status.FAIL,
        "chat.response.id_prefix": Status.FAIL,
        "models.unknown_model_404": Status.FAIL,
        "n.nonstream": Status.FAIL,
    }


def test_cli_run_exits_nonzero_on_a_must_failure(vllm_sim: ManagedProcess, tmp_path: Path) -> None:
    code, data = run_cli(vllm_sim.url, "sim-model", tmp_path, "--only", "errors.envelope")
    assert code == 1
    assert data["results"][0]["status"] == "fail"
