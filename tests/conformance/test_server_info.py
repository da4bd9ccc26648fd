"""report.json names the server it judged as the server reports itself: each runtime's
own version path, read from real simulator processes and a real gateway; anything else
is unidentified, never guessed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.server_info import ServerInfo, identify, probe
from gateway.openai.api_routes import gateway_version
from simulators.sglang import VERSION as SGLANG_VERSION
from simulators.testing import start_simulator
from simulators.tgi import VERSIONS as TGI_VERSIONS
from simulators.trtllm import VERSION as TRTLLM_VERSION
from simulators.vllm import VERSION as VLLM_VERSION


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("vllm", ServerInfo("vllm", VLLM_VERSION, "/version")),
        ("sglang", ServerInfo("sglang", SGLANG_VERSION, "/get_server_info")),
        ("tgi", ServerInfo("tgi", TGI_VERSIONS["3.3"], "/info")),
        ("trtllm", ServerInfo("trtllm", TRTLLM_VERSION, "/version")),
    ],
)
def test_each_runtime_is_named_from_its_own_version_path(kind: str, expected: ServerInfo) -> None:
    with start_simulator(kind, model_name="sim-model") as sim:
        assert asyncio.run(probe(sim.url)) == expected
        assert asyncio.run(probe(sim.url + "/v1/")) == expected  # the base URL as the client takes it


def test_the_gateway_names_itself_with_its_version(gateway) -> None:
    info = asyncio.run(probe(gateway.url))
    assert info == ServerInfo("switchyard", gateway_version(), "/openapi.json")


def test_llama_cpp_is_named_by_its_build() -> None:
    info = identify({"/props": {"build_info": "b5400-4f1a2b3c", "total_slots": 1}})
    assert info == ServerInfo("llama.cpp", "b5400-4f1a2b3c", "/props")


def test_a_server_that_says_nothing_recognisable_is_unidentified() -> None:
    assert identify({}).name is None
    # Another FastAPI app's document, a /version without /v1/models owners, a TGI-looking /info without a version.
    assert identify({"/openapi.json": {"info": {"title": "FastAPI", "version": "0.1.0"}}}).name is None
    assert identify({"/version": {"version": "1.0"}}) == ServerInfo(None, "1.0", "/version")
    assert identify({"/info": {"model_id": "m"}}).name is None
    models = {"data": [{"owned_by": "vllm"}, {"owned_by": "tensorrt_llm"}]}  # two owners: which one is unknown
    assert identify({"/version": {"version": "1.0"}, "/v1/models": models}).name is None


def test_a_server_that_is_not_there_is_unidentified() -> None:
    assert asyncio.run(probe("http://127.0.0.1:9")) == ServerInfo(None, None, None)


def test_a_run_records_the_server_in_report_json_and_its_pages(tmp_path: Path) -> None:
    with start_simulator("sglang", model_name="sim-model") as sim:
        args = ["--base-url", sim.url, "--model", "sim-model", "--report", str(tmp_path), "--quiet"]
        main(["conformance", "run", *args, "--only", "models.list"])
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["server"] == {"name": "sglang", "version": SGLANG_VERSION, "source": "/get_server_info"}
    assert f"sglang {SGLANG_VERSION}" in (tmp_path / "report.md").read_text()
    assert f"sglang {SGLANG_VERSION}" in (tmp_path / "report.html").read_text()
