"""`python -m conformance.real_llamacpp`: the suite against a real llama.cpp server
(`llama-server`, built from source by scripts/install-llamacpp.sh), directly and through
the gateway, into one matrix (docs/conformance/llamacpp). The model is make-tiny's,
written as an F32 GGUF by engine/gguf_export.py, so nothing is downloaded. The server
runs with the flags the gateway needs (processes/llamacpp.py): `--jinja`, `--metrics`,
`--slots`, two slots.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import yaml

from conformance.check import PROFILES
from conformance.ci_matrix import load_expected, print_direct_deviations
from conformance.cli import EXIT_INCOMPLETE, EXIT_MUST_FAILED, EXIT_OK
from conformance.matrix import MatrixReport, hide_loopback_ports, print_gateway_verdict, write_matrix
from conformance.procs import ManagedProcess, free_port, start_gateway
from conformance.real_vllm import build_model, run
from conformance.result import Verdict
from processes.llamacpp import LLAMA_SERVER, llamacpp_server_argv, write_gguf

SERVED_NAME = "tiny"
CONTEXT = 2048  # two slots of 1024 positions, as the vLLM run's max_model_len


def start_llamacpp(model_dir: Path, work: Path) -> ManagedProcess:
    if not LLAMA_SERVER.exists():
        raise RuntimeError(f"{LLAMA_SERVER} is missing: run scripts/install-llamacpp.sh first")
    gguf = write_gguf(model_dir, work / "tiny.gguf")
    port = free_port()
    argv = llamacpp_server_argv(gguf, port, CONTEXT, parallel=2, alias=SERVED_NAME)
    p = ManagedProcess("llama-server", argv, f"http://127.0.0.1:{port}", work / "llamacpp.log")
    return p.wait_ready("/health", timeout_s=120)


def gateway_config(url: str, port: int) -> dict:
    backend = {"name": "llamacpp", "adapter": "llamacpp", "url": url, "served_model": SERVED_NAME}
    return {"listen": {"host": "127.0.0.1", "port": port}, "models": {"tiny": {"backends": [backend]}}}


def run_real_llamacpp(out: Path, model_dir: Path | None, profiles: list[str]) -> MatrixReport:
    """Build the model, start llama-server and a gateway in front of it, run the suite
    on both, stop them, and write the matrix into `out`."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"conformance-real-llamacpp-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    model_dir = build_model(model_dir or work / "model")
    server = gateway = None
    try:
        server = start_llamacpp(model_dir, work)
        port = free_port()
        config = gateway_config(server.url, port)
        config_path = work / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        gateway = start_gateway(config_path, port, work)
        matrix = asyncio.run(run(config, gateway.url, server.url, profiles))
    finally:
        for p in (gateway, server):
            if p is not None:
                p.stop()
    hide_loopback_ports(matrix)
    write_matrix(matrix, out, "Conformance: real llama.cpp llama-server (llama-cpp-python 0.3.36's sources)")
    return matrix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.real_llamacpp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", default="docs/conformance/llamacpp", help="output directory")
    parser.add_argument("--model-dir", default=None, help="a model directory (default: make-tiny into a temp dir)")
    parser.add_argument("--profile", action="append", help="profiles (default: core, tools, structured)")
    args = parser.parse_args(argv)
    profiles = [p for v in (args.profile or ["core,tools,structured"]) for p in v.split(",") if p in PROFILES]
    started = time.monotonic()
    matrix = run_real_llamacpp(Path(args.report), Path(args.model_dir) if args.model_dir else None, profiles)
    print(f"written to {args.report} in {time.monotonic() - started:.0f} s")
    print_direct_deviations(matrix, load_expected())  # llama.cpp's own, listed in expected_deviations.yaml
    print_gateway_verdict(matrix)
    return {Verdict.FAIL: EXIT_MUST_FAILED, Verdict.INCOMPLETE: EXIT_INCOMPLETE}.get(matrix.verdict, EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())
