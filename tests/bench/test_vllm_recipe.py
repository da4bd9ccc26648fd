"""The engine benchmark's vLLM server comes from the one recipe in processes/vllm_cpu.py
(nothing is started here: starting it is the `vllm` tier's job)."""

from __future__ import annotations

from pathlib import Path

from bench.vllm_cpu import vllm_server
from processes.vllm_cpu import VLLM_CPU_ENV, VLLM_PYTHON, vllm_server_argv


def test_bench_vllm_server_uses_the_recipe(tmp_path: Path) -> None:
    server = vllm_server("/models/tiny", tmp_path)
    port = int(server.argv[server.argv.index("--port") + 1])
    assert server.argv == vllm_server_argv("/models/tiny", port, 2048)
    assert server.env == VLLM_CPU_ENV


def test_recipe_flags() -> None:
    argv = vllm_server_argv(Path("/m"), 8123, 1024, served_name="s", extra=["--enable-scale-out"])
    assert argv[:3] == [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server"]
    pairs = dict(zip(argv[3:-1:2], argv[4:-1:2]))
    assert pairs == {
        "--model": "/m",
        "--served-model-name": "s",
        "--host": "127.0.0.1",
        "--port": "8123",
        "--max-model-len": "1024",
        "--dtype": "float32",
    }
    assert argv[-1] == "--enable-scale-out"
    assert VLLM_PYTHON.parts[-3:] == (".venv-vllm", "bin", "python")


def test_tools_only_when_asked() -> None:
    from processes.vllm_cpu import HERMES_TOOLS

    assert "--tool-call-parser" not in vllm_server_argv("m", 1, 16)
    assert vllm_server_argv("m", 1, 16, extra=HERMES_TOOLS)[-3:] == list(HERMES_TOOLS)
