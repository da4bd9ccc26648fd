"""`python -m conformance.ci_matrix` (what `make conformance` runs).

Starts the four runtime simulators and a gateway (native engine plus one model
per simulator, API keys, a rate-limited tenant, a model the main key may not
use, a one-slot model that overflows), then:

1. runs the suite through the gateway for every model: every MUST that applies
   must pass (the simulators are declared simulators, the native engine a
   non-simulator; all of them with tools and structured output: `declarations`);
2. runs the gateway profile (401/404/429/503) once, on its own column;
3. runs the suite directly against each simulator: those failures are the
   runtime's own deviations, listed as expected, and never fail the build.

Exit status 1 when any MUST check fails (or errors) through the gateway, 3
when none fails but a gateway column is INCOMPLETE (a MUST that applies did
not run; conformance/README.md), unless --allow-incomplete.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from conformance.catalog import select
from conformance.check import Check
from conformance.cli import EXIT_INCOMPLETE, EXIT_MUST_FAILED, EXIT_OK
from conformance.matrix import Declaration, MatrixReport, targets_from_config, write_matrix
from conformance.procs import SWITCHYARD, ManagedProcess, free_port, start_gateway
from conformance.runner import run_checks
from conformance.target import Target

SIM_MODEL = "sim-model"
# Flags that switch on the runtime features the suite exercises (tool parsers).
SIMULATOR_FLAGS: dict[str, list[str]] = {
    "vllm": ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    "sglang": ["--tool-call-parser", "qwen25", "--health-latency", "0"],
    "trtllm": ["--tool_parser", "qwen3"],
    "tgi": [],
}
# Structured output: the native engine has a grammar engine, and each simulator
# imitates its runtime's guided decoding (a document valid against the schema).
CI_PROFILES = ["core", "tools", "structured", "responses", "embeddings"]
# Through the gateway every model speaks the Responses API (the gateway encodes it,
# whatever the runtime); the simulators themselves do not serve it.
SIMULATOR_FEATURES = frozenset({"tools", "structured_output", "responses"})
NATIVE_FEATURES = frozenset({"tools", "structured_output", "responses", "embeddings"})
GATEWAY_ONLY_FEATURES = frozenset({"responses"})
# Embedding models (vLLM's pooling runner, SGLang's --is-embedding): the embeddings
# profile alone runs on them, through the gateway and directly.
EMBEDDING_SIMULATORS: dict[str, tuple[str, list[str]]] = {
    "emb-vllm": ("vllm", ["--runner", "pooling", "--embedding-dim", "32"]),
    "emb-sglang": ("sglang", ["--is-embedding", "--embedding-dim", "32", "--health-latency", "0"]),
}
EMBEDDING_FEATURES = frozenset({"embeddings"})
RATE_LIMIT_RPM = 3
EXPECTED_DEVIATIONS = Path(__file__).with_name("expected_deviations.yaml")


def _sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def build_config(sim_urls: dict[str, str], port: int, keys: dict[str, str]) -> dict[str, Any]:
    models: dict[str, Any] = {
        "native": {"backends": [{"name": "native", "adapter": "native", "model_path": "builtin:tiny"}]}
    }
    for kind, url in sim_urls.items():
        if kind in EMBEDDING_SIMULATORS:
            adapter = EMBEDDING_SIMULATORS[kind][0]
            backend = {"name": kind, "adapter": adapter, "url": url, "served_model": SIM_MODEL}
            models[kind] = {"backends": [{**backend, "options": {"embeddings": True}}]}
            continue
        models[f"sim-{kind}"] = {
            "backends": [{"name": f"sim-{kind}", "adapter": kind, "url": url, "served_model": SIM_MODEL}]
        }
    # The main key may use every model but `restricted` (404, as if missing), and `overload`
    # has one slot and a two-deep queue, so a burst must be shed (503).
    models["restricted"] = {
        "backends": [{"name": "native-restricted", "adapter": "native", "model_path": "builtin:tiny"}]
    }
    models["overload"] = {
        "backends": [{"name": "native-overload", "adapter": "native", "model_path": "builtin:tiny", "max_inflight": 1}]
    }
    allowed = [m for m in models if m != "restricted"]
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "auth": {
            "mode": "keys",
            "api_keys": [
                {"sha256": _sha256(keys["main"]), "tenant": "main"},
                {"sha256": _sha256(keys["limited"]), "tenant": "limited"},
            ],
        },
        "quota_store": {"kind": "memory"},
        "tenants": {"main": {"models": allowed}, "limited": {"models": allowed, "requests_per_minute": RATE_LIMIT_RPM}},
        "admission": {"max_queue": 2, "max_queue_wait_s": 10, "full_status": 503},
        "models": models,
    }


def declarations(config: dict[str, Any]) -> dict[str, Declaration]:
    """What each model of `build_config`'s config is: the simulators understand
    the fault markers, call tools and follow `response_format` the way their
    runtime does; the native engine has both features and no fault markers."""
    out = {}
    for name in config["models"]:
        if name in EMBEDDING_SIMULATORS:
            out[name] = Declaration(simulator=True, capabilities=EMBEDDING_FEATURES)
        elif name.startswith("sim-"):
            out[name] = Declaration(simulator=True, capabilities=SIMULATOR_FEATURES)
        else:
            out[name] = Declaration(capabilities=NATIVE_FEATURES)
    return out


def start_simulators(log_dir: Path) -> dict[str, ManagedProcess]:
    procs: dict[str, ManagedProcess] = {}
    runs = {kind: (kind, flags) for kind, flags in SIMULATOR_FLAGS.items()} | EMBEDDING_SIMULATORS
    for name, (kind, flags) in runs.items():
        port = free_port()
        procs[name] = ManagedProcess(
            name if name in EMBEDDING_SIMULATORS else f"sim-{kind}",
            [*SWITCHYARD, "simulate", kind, "--port", str(port), "--model-name", SIM_MODEL, *flags],
            f"http://127.0.0.1:{port}",
            log_dir / f"{name if name in EMBEDDING_SIMULATORS else f'sim-{kind}'}.log",
        )
    try:
        for p in procs.values():
            p.wait_ready("/health", timeout_s=60)
    except Exception:
        for p in procs.values():
            p.stop()
        raise
    return procs


def column_checks(target: Target, checks: list[Check]) -> list[Check]:
    """What runs on a column: an embedding model takes the embeddings checks alone. With
    none of those selected (`--profile responses`) it has no column, rather than an
    empty one that would read as INCOMPLETE."""
    if target.capabilities == EMBEDDING_FEATURES:
        return [c for c in checks if c.profile == "embeddings"]
    return checks


async def run_all(
    config: dict[str, Any], gateway_url: str, keys: dict[str, str], profiles: list[str], quiet: bool
) -> MatrixReport:
    def progress(target: Target, r: Any) -> None:
        if not quiet:
            print(
                f"[{target.name}] {r.status:5} {r.level:6} {r.id}"
                + (f" — {r.message[:140]}" if r.status != "pass" and r.message else ""),
                flush=True,
            )

    matrix = MatrixReport()
    checks = select(profiles)
    # The failure checks run on the columns declared simulators (directly: the
    # runtime's own failure shapes; through the gateway: what it makes of them)
    # and are not applicable on the others.
    checks += [c for c in select(["gateway"], ["faults."]) if c not in checks]
    for target in targets_from_config(
        config,
        gateway_url,
        direct=True,
        api_key=keys["main"],
        models=[m for m in config["models"] if m not in ("restricted", "overload")],
        declarations=declarations(config),
        metrics_url=gateway_url + "/metrics",
    ):
        if target.runtime is not None and target.capabilities is not None:
            target.capabilities = target.capabilities - GATEWAY_ONLY_FEATURES  # the runtime's own URL
        chosen = column_checks(target, checks)
        if not chosen:
            continue
        run = await run_checks(target, chosen, profiles, progress=lambda r, t=target: progress(t, r))
        matrix.runs.append((target, run))
    policies = Target(
        base_url=gateway_url,
        model="native",
        name="gateway/policies",
        api_key=keys["main"],
        forbidden_model="restricted",
        rate_limited_key=keys["limited"],
        overload_model="overload",
        metrics_url=gateway_url + "/metrics",
    )
    run = await run_checks(policies, select(["gateway"]), ["gateway"], progress=lambda r: progress(policies, r))
    matrix.runs.append((policies, run))
    return matrix


def load_expected(path: Path = EXPECTED_DEVIATIONS) -> dict[str, dict[str, str]]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def sort_deviations(matrix: MatrixReport, expected: dict[str, dict[str, str]]) -> dict[str, dict[str, list[str]]]:
    """Per direct target: failures that are `expected` (with the reason),
    `unexpected`, and listed deviations no longer seen (`missing`)."""
    out: dict[str, dict[str, list[str]]] = {}
    for target, run in matrix.runs:
        if target.runtime is None:
            continue
        listed = expected.get(target.runtime, {})
        failing = {r.id: r for r in run.results if r.status in ("fail", "error")}
        ran = {r.id for r in run.results if r.status not in ("skip", "na")}
        out[target.name] = {
            "expected": [f"{cid}: {listed[cid]}" for cid in failing if cid in listed],
            "unexpected": [f"[{r.level}] {cid}: {r.message[:120]}" for cid, r in failing.items() if cid not in listed],
            "missing": [f"{cid}: {why}" for cid, why in listed.items() if cid in ran and cid not in failing],
        }
    return out


def print_direct_deviations(matrix: MatrixReport, expected: dict[str, dict[str, str]]) -> None:
    for name, groups in sort_deviations(matrix, expected).items():
        print(f"\n{name}: {len(groups['expected'])} expected runtime deviation(s), normalized by the gateway")
        for line in groups["expected"]:
            print(f"  expected   {line}")
        for line in groups["unexpected"]:
            print(f"  UNLISTED   {line}")
        for line in groups["missing"]:
            print(f"  NOT SEEN   {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.ci_matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--report", default="reports/conformance", help="output directory (default reports/conformance)"
    )
    parser.add_argument(
        "--profile", action="append", help=f"profiles through the gateway (default {','.join(CI_PROFILES)})"
    )
    parser.add_argument(
        "--allow-incomplete", action="store_true", help="exit 0 when a gateway column is INCOMPLETE (still reported)"
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    profiles = [p for v in (args.profile or CI_PROFILES) for p in v.split(",")]
    out = Path(args.report)
    logs = out / "logs"
    keys = {"main": "sk-ci-main-" + secrets.token_hex(12), "limited": "sk-ci-limited-" + secrets.token_hex(12)}
    started = time.monotonic()
    sims: dict[str, ManagedProcess] = {}
    gateway = None
    try:
        sims = start_simulators(logs)
        port = free_port()
        config = build_config({k: p.url for k, p in sims.items()}, port, keys)
        config_path = logs / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        gateway = start_gateway(config_path, port, logs)
        matrix = asyncio.run(run_all(config, gateway.url, keys, profiles, args.quiet))
    finally:
        if gateway is not None:
            gateway.stop()
        for p in sims.values():
            p.stop()
    paths = write_matrix(matrix, out, "Conformance matrix (CI: gateway x native engine and four simulators)")
    print(f"\nmatrix written in {time.monotonic() - started:.0f} s: " + ", ".join(str(p) for p in paths.values()))
    print_direct_deviations(matrix, load_expected())
    failures = matrix.gateway_must_failures()
    if failures:
        print(f"\nFAIL: {len(failures)} MUST failure(s) through the gateway:", file=sys.stderr)
        for name, r in failures:
            print(f"  {name}: {r.id}: {r.message[:160]}", file=sys.stderr)
        return EXIT_MUST_FAILED
    incomplete = matrix.incomplete_gateway_columns()
    if incomplete:
        print(f"\nINCOMPLETE: {len(incomplete)} gateway column(s) did not run every MUST check:", file=sys.stderr)
        for name, run in incomplete:
            for r in run.must_skips:
                print(f"  {name}: {r.id}: {r.message[:160]}", file=sys.stderr)
        return EXIT_OK if args.allow_incomplete else EXIT_INCOMPLETE
    print("\nPASS: every MUST check that applies passes through the gateway")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
