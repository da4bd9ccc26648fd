"""The LiteLLM comparison's own pieces; the full run needs .venv-litellm
(`make test-litellm` installs it) and is marked litellm."""

from __future__ import annotations

import pytest
import yaml

from bench import litellm_compare
from bench.litellm_compare import LITELLM, litellm_config, main, ratios


def test_config_points_litellm_at_the_upstream() -> None:
    cfg = yaml.safe_load(litellm_config("http://127.0.0.1:9001"))
    (entry,) = cfg["model_list"]
    assert entry["model_name"] == "m"
    assert entry["litellm_params"]["api_base"] == "http://127.0.0.1:9001/v1"
    assert entry["litellm_params"]["model"] == "openai/m"


def test_ratios_read_added_latency_and_throughput() -> None:
    latency = [{"scenario": "s", "gateway": {"added_p50_ms": 0.5}, "litellm": {"added_p50_ms": 8.5}}]
    throughput = [{"scenario": "t", "gateway": {"requests_per_s": 1500.0}, "litellm": {"requests_per_s": 130.0}}]
    lines = ratios(latency, throughput)
    assert "LiteLLM / gateway = 17.0x" in lines[0]
    assert "gateway / LiteLLM = 11.5x" in lines[1]


def test_missing_litellm_env_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(litellm_compare, "LITELLM", tmp_path / "nope" / "litellm")
    assert main(["--out", str(tmp_path)]) == 2
    assert "install-litellm.sh" in capsys.readouterr().err


@pytest.mark.litellm
def test_full_comparison(tmp_path) -> None:
    assert LITELLM.exists(), "needs .venv-litellm: `make test-litellm` installs it (scripts/install-litellm.sh)"
    assert (
        main(
            [
                "--requests",
                "40",
                "--rounds",
                "1",
                "--warmup",
                "5",
                "--duration-s",
                "1",
                "--no-wrk",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert (tmp_path / "litellm.md").read_text().count("| litellm |") == 4
