"""The one recipe for a real llama.cpp server (the `llamacpp` tier of tests, its
conformance run, the parity check, the recordings).

`llama-server` is built from source into `.venv-llamacpp` at the top of the repository
(scripts/install-llamacpp.sh); its model is a GGUF written from a make-tiny directory by
engine/gguf_export.py, run with the `gguf` package vendored beside those sources.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMACPP_HOME = ROOT / ".venv-llamacpp"
LLAMA_SERVER = LLAMACPP_HOME / "bin" / "llama-server"
GGUF_PY = LLAMACPP_HOME / "src" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp" / "gguf-py"


def write_gguf(model_dir: str | Path, out: str | Path, timeout_s: float = 300.0) -> Path:
    """`model_dir` (make-tiny's HF directory) as an F32 GGUF at `out`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(GGUF_PY), str(ROOT)])}
    subprocess.run(
        [sys.executable, "-m", "engine.gguf_export", str(model_dir), str(out)],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=timeout_s,
        capture_output=True,
    )
    return Path(out)


def llamacpp_server_argv(
    gguf: str | Path,
    port: int,
    ctx: int,
    *,
    parallel: int = 2,
    alias: str = "tiny",
    threads: int = 1,
    embeddings: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """`llama-server` on 127.0.0.1:`port` with what the gateway reads: `--jinja` (tool
    calls), `--metrics` (load), `--slots`, `--parallel` slots sharing `ctx` positions
    (each slot gets ctx/parallel). Attention as the other implementations compute it:
    KV cache in F32, as the weights are (the default F16 cache rounds attention inputs),
    and flash attention off (its CPU kernel, on by default, moved first-token logprobs by
    up to 2e-3 from transformers' float32; off, they agree to 1e-6: docs/runtimes.md
    §8.9). Otherwise long greedy generations drift from the others at near ties. No web
    UI; `extra` flags follow."""
    argv = [
        str(LLAMA_SERVER),
        *("-m", str(gguf), "--alias", alias, "--host", "127.0.0.1", "--port", str(port)),
        *("-c", str(ctx), "--parallel", str(parallel), "--threads", str(threads), "--threads-batch", str(threads)),
        *("--jinja", "--metrics", "--slots", "--no-webui"),
        *("--cache-type-k", "f32", "--cache-type-v", "f32", "--flash-attn", "off"),
    ]
    if embeddings:
        argv.append("--embeddings")
    return [*argv, *extra]
