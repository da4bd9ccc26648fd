"""`make bench-litellm`: the gateway and LiteLLM proxy in front of the same upstream,
measured in one run with the overhead benchmark's scenarios.

LiteLLM runs from its own environment (.venv-litellm, scripts/install-litellm.sh)
with one worker, like the gateway; no master key, no database, no callbacks, its
cost map read locally (nothing is fetched). Prints what each adds over calling the
upstream directly and the ratios LiteLLM / gateway.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.overhead import (
    MODEL,
    add_measure_arguments,
    failed_requests,
    measure_all,
    start_upstream_and_gateway,
    tables,
)
from bench.procs import ROOT, Server
from bench.report import write_json
from processes import free_port

LITELLM = ROOT / ".venv-litellm" / "bin" / "litellm"


def litellm_config(upstream: str) -> str:
    return (
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: sk-unused\n"
        "litellm_settings:\n"
        "  drop_params: true\n"
        "  telemetry: false\n"
    )


def ratios(latency: list[dict[str, Any]], throughput: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in latency:
        g, lt = r["gateway"]["added_p50_ms"], r["litellm"]["added_p50_ms"]
        lines.append(
            f"- {r['scenario']}: LiteLLM adds {lt:.3f} ms p50, the gateway {g:.3f} ms"
            + (f" (LiteLLM / gateway = {lt / g:.1f}x)" if g > 0 else "")
        )
    for r in throughput:
        g, lt = r["gateway"]["requests_per_s"], r["litellm"]["requests_per_s"]
        lines.append(
            f"- {r['scenario']}: gateway {g:,.0f} req/s, LiteLLM {lt:,.0f} req/s"
            + (f" (gateway / LiteLLM = {g / lt:.1f}x)" if lt > 0 else "")
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.litellm_compare", description=__doc__.split("\n\n")[0])
    add_measure_arguments(p, "reports/litellm")
    args = p.parse_args(argv)
    if not LITELLM.exists():
        print(f"{LITELLM} not found: run `bash scripts/install-litellm.sh` (make bench-litellm does)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    up, gw = start_upstream_and_gateway(args.out, args.access_log)
    lt_port = free_port()
    cfg = args.out / "litellm.yaml"
    cfg.write_text(litellm_config(up.base_url))
    env = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "DISABLE_SCHEMA_UPDATE": "True",
        # No auth on either side (the gateway runs auth: none too), on loopback only.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    lt = Server(
        "litellm",
        [str(LITELLM), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(lt_port), "--num_workers", "1"],
        f"http://127.0.0.1:{lt_port}/health/liveliness",
        args.out,
        env=env,
    )
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    names = ["direct", "gateway", "litellm"]
    with up, gw, lt:
        latency, throughput = measure_all({"direct": up.base_url, "gateway": gw.base_url, "litellm": lt.base_url}, args)
    doc = {
        "kind": "switchyard.bench.litellm",
        "version": 1,
        "started": started,
        "latency": latency,
        "throughput": throughput,
        "litellm_cmd": " ".join(lt.argv),
        "gateway_cmd": " ".join(gw.argv),
    }
    write_json(args.out / "litellm.json", doc)
    text = "\n".join(
        [
            "# Gateway vs LiteLLM proxy, same upstream, one worker each",
            "",
            *tables(latency, throughput, names),
            "",
            "Ratios:",
            "",
            *ratios(latency, throughput),
            "",
        ]
    )
    (args.out / "litellm.md").write_text(text)
    print(text)
    failures = failed_requests(latency, throughput, names)
    if failures:
        print(f"{failures} requests failed during the measurement: see {args.out}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
