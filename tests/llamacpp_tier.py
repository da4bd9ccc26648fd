"""A real llama.cpp server for the `llamacpp` and `parity` tiers: make-tiny's model written
as an F32 GGUF (engine/gguf_export.py), served by the `llama-server` that
scripts/install-llamacpp.sh built, on a free loopback port."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.make_tiny import make_tiny
from processes import LLAMA_SERVER, free_port, llamacpp_server_argv, write_gguf
from tests.procs import Process

# Per slot; the tiny model says 4096 positions, RoPE has no limit, so the server is told
# more: a generation the cancellation fails to stop then runs for many seconds.
SLOT_CTX = 16384
SLOTS = 2


def tiny_model(tmp: Path) -> Path:
    return make_tiny(tmp / "tiny", seed=0)


def start_llamacpp(model_dir: Path, tmp: Path, *, slot_ctx: int = SLOT_CTX, slots: int = SLOTS) -> Process:
    if not LLAMA_SERVER.exists():
        pytest.fail("no .venv-llamacpp: run `make test-llamacpp` (it runs scripts/install-llamacpp.sh first)")
    gguf = write_gguf(model_dir, tmp / "tiny.gguf")
    port = free_port()
    argv = llamacpp_server_argv(
        gguf,
        port,
        slot_ctx * slots,
        parallel=slots,
        extra=("--override-kv", f"llama.context_length=int:{slot_ctx}"),
    )
    p = Process(argv, f"http://127.0.0.1:{port}", tmp / "llama-server.log")
    try:
        p.wait_ready("/health", timeout=120)
    except Exception:
        p.stop()
        raise
    return p


def backend(server: Process, name: str = "llamacpp-real") -> dict:
    """The gateway's backend for it: as many generations at once as it has slots, so a
    request beyond them waits in the gateway's bounded queue, not in llama.cpp's."""
    return {"name": name, "adapter": "llamacpp", "url": server.url, "served_model": "tiny", "max_inflight": SLOTS}
