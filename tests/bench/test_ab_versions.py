"""bench/ab_versions.py: the CPU it reads from a server's process, and its refusal without wrk."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bench import ab_versions, wrk
from bench.procs import Server, python_module
from processes import free_port


def test_a_server_s_cpu_time_is_read_and_grows_with_its_work(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = python_module("simulators.openai_upstream", "--port", str(port), "--chunks", "16", "--model-name", "m")
    with Server("upstream", cmd, url + "/health", tmp_path) as server:
        before = ab_versions.cpu_s(server)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
        with httpx.Client() as client:
            for _ in range(300):
                assert client.post(url + "/v1/chat/completions", json=body).status_code == 200
        after = ab_versions.cpu_s(server)
    assert 0 < before < after


def test_without_wrk_it_says_so_and_measures_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(wrk, "available", lambda: False)
    assert ab_versions.main(["--other", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "wrk not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
