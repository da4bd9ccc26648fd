"""Child processes on loopback for tests, conformance runs and benchmarks.

Standard library only, and nothing of ours: every layer may use it.

    port = free_port()
    with Child([sys.executable, "-m", "http.server", str(port)], logs / "http.log") as child:
        child.wait_ready(http_probe(f"http://127.0.0.1:{port}/"))
        ...  # leaving the block stops the child and anything it started

A child runs in its own session, so `stop()` (SIGTERM, then SIGKILL after a
timeout) reaches the processes it spawned too; `kill()` is the crash (SIGKILL
at once). `wait_ready` polls a probe and fails early, with the log's tail, when
the child exits first.
"""

from processes.child import Child, ChildExited, ChildFailed, NotReady
from processes.llamacpp import LLAMA_SERVER, llamacpp_server_argv, write_gguf
from processes.ports import free_port
from processes.probes import Probe, http_probe, tcp_probe
from processes.redis import redis_ping, redis_server_argv
from processes.vllm_cpu import HERMES_TOOLS, VLLM_CPU_ENV, VLLM_PYTHON, vllm_server_argv

__all__ = [
    "Child",
    "ChildExited",
    "ChildFailed",
    "NotReady",
    "HERMES_TOOLS",
    "LLAMA_SERVER",
    "VLLM_CPU_ENV",
    "VLLM_PYTHON",
    "Probe",
    "free_port",
    "llamacpp_server_argv",
    "http_probe",
    "redis_ping",
    "redis_server_argv",
    "vllm_server_argv",
    "tcp_probe",
    "write_gguf",
]
