"""A real vLLM CPU server for the engine benchmark: vLLM's CPU build in its own
environment, .venv-vllm (scripts/install-vllm.sh), on a free loopback port."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.procs import Server
from processes import free_port
from processes.vllm_cpu import VLLM_CPU_ENV, VLLM_PYTHON, vllm_server_argv


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
    """Start-up takes about 40 s on 2 idle cores, minutes on a loaded machine."""
    port = free_port()
    argv = vllm_server_argv(model_dir, port, 2048)
    return Server(
        "vllm",
        argv,
        f"http://127.0.0.1:{port}/health",
        log_dir,
        env=VLLM_CPU_ENV,
        ready_timeout_s=900,
    )
