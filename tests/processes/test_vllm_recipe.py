"""The vLLM server recipe: the flags every use shares, and tools only when asked."""

from __future__ import annotations

from processes import VLLM_PYTHON, vllm_server_argv


def test_the_recipe_serves_the_model_on_loopback_in_float32() -> None:
    argv = vllm_server_argv("/models/tiny", 8123, 2048, "served")
    assert argv[:3] == [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::2], argv[4::2]))
    assert flags == {
        "--model": "/models/tiny",
        "--served-model-name": "served",
        "--host": "127.0.0.1",
        "--port": "8123",
        "--max-model-len": "2048",
        "--dtype": "float32",
    }


def test_tools_only_when_asked() -> None:
    assert "--tool-call-parser" not in vllm_server_argv("m", 1, 16)
    argv = vllm_server_argv("m", 1, 16, hermes_tools=True)
    assert argv[-3:] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
