"""`switchyard conformance matrix` with real processes: relative paths (the
config, the targets file, and paths inside the config) mean what they mean
where the command runs; fault checks run only on the models declared
simulators; user errors are one line and exit 2."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conformance.cli import EXIT_OK, EXIT_USAGE, main
from simulators.testing import start_simulator

KEY = "sk-matrix-test-key"


@pytest.fixture(scope="module")
def vllm_sim() -> Iterator[str]:
    with start_simulator("vllm", model_name="sim-model") as sim:
        yield sim.url


def gateway_config(sim_url: str) -> dict:
    backend = {"adapter": "vllm", "url": sim_url, "served_model": "sim-model"}
    return {
        "listen": {"host": "127.0.0.1", "port": 9},
        # A path relative to the directory the command runs in, as for `switchyard serve`.
        "auth": {"mode": "keys", "api_keys_file": "keys.yaml"},
        "models": {
            "sim": {"backends": [{"name": "sim-a", **backend}]},
            "real": {"backends": [{"name": "b", **backend}]},
        },
    }


def matrix(*args: str) -> int:
    return main(["conformance", "matrix", "--quiet", *args])


def test_relative_paths_and_sim_faults_scoping(
    vllm_sim: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "gateway.yaml").write_text(yaml.safe_dump(gateway_config(vllm_sim)))
    (work / "keys.yaml").write_text(
        yaml.safe_dump([{"sha256": hashlib.sha256(KEY.encode()).hexdigest(), "tenant": "t"}])
    )
    (work / "targets.yaml").write_text("models:\n  sim:\n    simulator: true\n")
    monkeypatch.chdir(work)
    code = matrix(
        "--config",
        "gateway.yaml",
        "--targets",
        "targets.yaml",
        "--start-gateway",
        "--api-key",
        KEY,
        "--only",
        "models.list",
        "--only",
        "faults.missing_done",
        "--report",
        "out",
    )
    assert code == EXIT_OK, capsys.readouterr().err
    data = json.loads((work / "out" / "matrix.json").read_text())
    cells = {row["id"]: row["cells"] for row in data["matrix"]}
    # The key file was read from here: the authenticated list call passed.
    assert cells["models.list"] == {"gateway/sim": "pass", "gateway/real": "pass"}
    # The gateway adds the [DONE] the simulator left out; the undeclared model gets no fault markers.
    assert cells["faults.missing_done"] == {"gateway/sim": "pass", "gateway/real": "na"}
    assert data["verdict"] == "PASS"


def test_matrix_user_errors_are_one_line(
    vllm_sim: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    good = gateway_config(vllm_sim)
    del good["auth"]
    Path("good.yaml").write_text(yaml.safe_dump(good))
    broken = {**good, "models": {"x": {"backends": [{"name": "x", "adapter": "nonesuch"}]}}}
    Path("refused.yaml").write_text(yaml.safe_dump(broken))
    Path("unknown-model.yaml").write_text("models:\n  nope: {simulator: true}\n")
    cases = [
        (["--config", "missing.yaml"], "cannot read gateway config"),
        (["--config", "good.yaml", "--sim-faults"], "declare `simulator: true`"),
        (["--config", "good.yaml", "--targets", "unknown-model.yaml"], "not a model of the gateway config"),
        (["--config", "good.yaml", "--models", "sim,other"], "--models: other not in the config"),
        # The gateway refuses the config: its own message, not a traceback.
        (["--config", "refused.yaml", "--start-gateway"], "the gateway did not start"),
    ]
    for args, message in cases:
        code = matrix(*args, "--only", "models.list", "--report", "out")
        err = capsys.readouterr().err
        assert code == EXIT_USAGE and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
