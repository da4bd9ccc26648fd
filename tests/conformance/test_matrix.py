"""Matrix assembly from a gateway config, its rendering, and how CI sorts the
runtimes' direct deviations into expected, unlisted and no longer seen."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.catalog import select
from conformance.ci_matrix import (
    CI_PROFILES,
    EMBEDDING_FEATURES,
    build_config,
    column_checks,
    declarations,
    load_expected,
    sort_deviations,
)
from conformance.matrix import MatrixReport, hide_loopback_ports, targets_from_config, write_matrix
from conformance.result import CheckResult, Level, Status
from conformance.runner import RunReport
from conformance.target import Target

CONFIG = {
    "listen": {"host": "0.0.0.0", "port": 8080},
    "models": {
        "llama": {
            "backends": [
                {"name": "vllm-a", "adapter": "vllm", "url": "http://vllm-a:8000", "served_model": "meta/llama"},
                {"name": "sgl-b", "adapter": "sglang", "url": "http://sgl-b:30000/v1", "served_model": "meta/llama"},
            ]
        },
        "tiny": {
            "backends": [
                {"name": "local", "adapter": "native", "model_path": "builtin:tiny"},
                {"name": "vllm-a", "adapter": "vllm", "url": "http://vllm-a:8000", "served_model": "meta/llama"},
            ]
        },
    },
}


def result(cid: str, status: Status, level: Level = Level.MUST) -> CheckResult:
    return CheckResult(cid, "a", level, f"check {cid}", status, "why" if status != Status.PASS else "", [], 0.0)


def run(*results: CheckResult) -> RunReport:
    return RunReport(target={}, profiles=["core"], started="t", duration_s=0.0, results=list(results))


def test_targets_from_config() -> None:
    targets = targets_from_config(CONFIG, "http://gw:8080", direct=True, api_key="k", forbidden_model="x")
    assert [t.name for t in targets] == [
        "gateway/llama",
        "gateway/tiny",
        "vllm-a (direct vllm)",
        "sgl-b (direct sglang)",
    ]
    gw, direct = targets[0], targets[2]
    assert (gw.base_url, gw.model, gw.api_key, gw.forbidden_model) == ("http://gw:8080/v1", "llama", "k", "x")
    assert (direct.base_url, direct.model, direct.runtime, direct.api_key) == (
        "http://vllm-a:8000/v1",
        "meta/llama",
        "vllm",
        None,
    )
    assert targets[3].metrics_url == "http://sgl-b:30000/metrics"
    assert len(targets_from_config(CONFIG, "http://gw:8080", direct=False)) == 2


def test_matrix_rows_and_reports(tmp_path: Path) -> None:
    m = MatrixReport()
    m.runs.append(
        (
            Target("http://gw", "llama", name="gateway/llama"),
            run(result("a.x", Status.PASS), result("b.y", Status.FAIL)),
        )
    )
    m.runs.append(
        (
            Target("http://v", "m", name="v (direct vllm)", runtime="vllm"),
            run(result("a.x", Status.FAIL), result("b.y", Status.SKIP)),
        )
    )
    rows = {r["id"]: r["cells"] for r in m.rows()}
    assert rows == {
        "a.x": {"gateway/llama": "pass", "v (direct vllm)": "fail"},
        "b.y": {"gateway/llama": "fail", "v (direct vllm)": "skip"},
    }
    assert [(n, r.id) for n, r in m.gateway_must_failures()] == [
        ("gateway/llama", "b.y")
    ]  # direct failures never block
    paths = write_matrix(m, tmp_path)
    assert json.loads(paths["json"].read_text())["matrix"][0]["cells"]["v (direct vllm)"] == "fail"
    assert "| `a.x` | MUST | ✅ pass | ❌ FAIL |" in paths["md"].read_text()
    assert (tmp_path / "gateway_llama" / "report.html").exists()  # each target's own full report
    # one stylesheet for the whole tree: the target pages link the matrix's
    assert paths["css"] == tmp_path / "report.css" and paths["css"].is_file()
    assert 'href="../report.css"' in (tmp_path / "gateway_llama" / "report.html").read_text()
    assert not (tmp_path / "gateway_llama" / "report.css").exists()
    assert 'href="report.css"' in paths["html"].read_text()


def test_loopback_ports_are_hidden_in_targets_and_messages() -> None:
    # Reports are committed: a rerun on other temporary ports must not change them.
    skipped = result("cancel.frees_running", Status.SKIP)
    skipped.message = "skipped: no running-requests gauge found at http://127.0.0.1:50551/metrics"
    m = MatrixReport()
    m.runs.append(
        (Target("http://127.0.0.1:41234", "m", name="lc (direct llamacpp)", runtime="llamacpp"), run(skipped))
    )
    hide_loopback_ports(m)
    target, report = m.runs[0]
    assert target.base_url == "<loopback>" and report.target["base_url"] == "<loopback>"
    assert skipped.message == "skipped: no running-requests gauge found at <loopback>/metrics"


def test_direct_deviations_are_sorted_never_hidden() -> None:
    m = MatrixReport()
    m.runs.append(
        (
            Target("http://v", "m", name="v (direct vllm)", runtime="vllm"),
            run(
                result("errors.envelope", Status.FAIL),
                result("stop.string", Status.FAIL),
                result("models.retrieve", Status.PASS),
                result("max_tokens.context_code", Status.SKIP),
            ),
        )
    )
    groups = sort_deviations(m, load_expected())["v (direct vllm)"]
    assert [g.split(":")[0] for g in groups["expected"]] == ["errors.envelope"]
    assert [g.split(":")[0] for g in groups["unexpected"]] == ["[MUST] stop.string"]
    assert [g.split(":")[0] for g in groups["missing"]] == ["models.retrieve"]  # a skipped check is not "not seen"


def test_ci_config_has_policies_to_exercise() -> None:
    config = build_config({"vllm": "http://127.0.0.1:1"}, 9, {"main": "a", "limited": "b"})
    assert "restricted" not in config["tenants"]["main"]["models"] and "restricted" in config["models"]
    assert config["tenants"]["limited"]["requests_per_minute"] > 0
    assert config["models"]["overload"]["backends"][0]["max_inflight"] == 1
    assert config["models"]["sim-vllm"]["backends"][0]["adapter"] == "vllm"


def test_ci_declares_the_simulators_and_the_native_engine() -> None:
    config = build_config({"vllm": "http://127.0.0.1:1", "tgi": "http://127.0.0.1:2"}, 9, {"main": "a", "limited": "b"})
    declared = declarations(config)
    # Simulators understand the fault markers, call tools and imitate their runtime's guided decoding.
    # Through the gateway every model speaks the Responses API.
    for sim in ("sim-vllm", "sim-tgi"):
        assert declared[sim].simulator
        assert declared[sim].capabilities == {"tools", "structured_output", "responses"}
    assert not declared["native"].simulator
    assert declared["native"].capabilities == {"tools", "structured_output", "responses", "embeddings"}
    assert {"structured", "responses", "embeddings"} <= set(CI_PROFILES)  # runs on every column


def test_ci_embedding_models_are_declared_embedding_only() -> None:
    urls = {"vllm": "http://127.0.0.1:1", "emb-vllm": "http://127.0.0.1:3", "emb-sglang": "http://127.0.0.1:4"}
    config = build_config(urls, 9, {"main": "a", "limited": "b"})
    declared = declarations(config)
    for name, adapter in (("emb-vllm", "vllm"), ("emb-sglang", "sglang")):
        backend = config["models"][name]["backends"][0]
        assert backend["adapter"] == adapter and backend["options"] == {"embeddings": True}
        assert declared[name].capabilities == {"embeddings"}
    assert "sim-emb-vllm" not in config["models"]


def test_an_embedding_model_runs_only_the_embeddings_checks_and_has_no_column_without_them():
    embedder = Target("http://gw", "emb", name="gateway/emb-vllm", capabilities=EMBEDDING_FEATURES)
    chat = Target("http://gw", "llama", name="gateway/llama", capabilities=frozenset({"tools", "embeddings"}))
    every = select(CI_PROFILES)
    assert {c.profile for c in column_checks(embedder, every)} == {"embeddings"}
    assert column_checks(chat, every) == every
    # `--profile responses` alone: the embedding model has nothing to run, so no
    # column (an empty one reads as INCOMPLETE); the chat model still runs them.
    responses = select(["responses"])
    assert responses and column_checks(embedder, responses) == []
    assert column_checks(chat, responses) == responses
