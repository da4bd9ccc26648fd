"""`python -m bench.ab_versions --other DIR`: requests/s of one gateway worker of
this checkout against one of another checkout (another commit in a worktree with
its own `.venv`), alternating wrk runs in one sitting on the same fast upstream,
so that the machine's load hits both alike. Prints each round, both means, the
ratio (this / other) and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from bench import wrk
from bench.overhead import MODEL, body, gateway_config
from bench.procs import Server, python_module
from processes import free_port


def gateway(name: str, checkout: Path, upstream: str, out: Path) -> Server:
    """One gateway worker of `checkout`, run by that checkout's own interpreter."""
    port = free_port()
    cfg = out / f"{name}.yaml"
    cfg.write_text(gateway_config(port, upstream, access_log=False))
    python = checkout / ".venv" / "bin" / "python"
    argv = [str(python) if python.exists() else sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg)]
    return Server(name, argv, f"http://127.0.0.1:{port}/healthz", out, cwd=checkout)


def cpu_s(server: Server) -> float:
    """CPU seconds (user + system) the server's process has used so far."""
    assert server.child is not None
    fields = Path(f"/proc/{server.child.pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab_versions", description=__doc__.split("\n\n")[0])
    p.add_argument("--other", type=Path, required=True, help="root of the other checkout (with .venv/)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--stream", action="store_true", help="16-chunk streamed answers instead of one JSON body")
    p.add_argument("--out", type=Path, default=Path("reports/ab_versions"))
    args = p.parse_args(argv)
    if not wrk.available():
        print("wrk not found (apt-get install -y wrk)", file=sys.stderr)
        return 2
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    up = Server(
        "upstream",
        python_module("simulators.openai_upstream", "--port", str(up_port), "--chunks", "16", "--model-name", MODEL),
        upstream + "/health",
        args.out,
    )
    this_root = Path(__file__).resolve().parents[1]
    payload = body(args.stream)
    rps: dict[str, list[float]] = {"other": [], "this": []}
    cpu_us: dict[str, list[float]] = {"other": [], "this": []}  # gateway CPU per request
    load_before = os.getloadavg()
    other = gateway("other", args.other.resolve(), upstream, args.out)
    with up, other as a, gateway("this", this_root, upstream, args.out) as b:
        servers = {"other": a, "this": b}
        for s in servers.values():  # warm up: imports, connection pools, first-call caches
            wrk.run(s.base_url + "/v1/chat/completions", payload, args.concurrency, 1.0)
        for r in range(args.rounds):
            order = ["other", "this"] if r % 2 == 0 else ["this", "other"]
            for name in order:
                cpu_before = cpu_s(servers[name])
                res = wrk.run(
                    servers[name].base_url + "/v1/chat/completions", payload, args.concurrency, args.duration_s
                )
                cpu_us[name].append((cpu_s(servers[name]) - cpu_before) / max(res.requests, 1) * 1e6)
                if res.errors:
                    print(f"round {r + 1} {name}: {res.errors} errors", file=sys.stderr)
                rps[name].append(res.requests_per_s)
            print(
                f"round {r + 1}: other {rps['other'][-1]:,.0f} req/s ({cpu_us['other'][-1]:.0f} us CPU/request)  "
                f"this {rps['this'][-1]:,.0f} req/s ({cpu_us['this'][-1]:.0f} us CPU/request)",
                flush=True,
            )
    mean = {k: statistics.fmean(v) for k, v in rps.items()}
    cpu = {k: statistics.fmean(v) for k, v in cpu_us.items()}
    mode = "streamed (16 chunks)" if args.stream else "non-streamed"
    print(
        f"{mode}, c{args.concurrency}, {args.duration_s:g} s x {args.rounds} rounds, one worker each\n"
        f"other ({args.other}): mean {mean['other']:,.0f} req/s, {cpu['other']:.0f} us gateway CPU/request\n"
        f"this ({this_root}): mean {mean['this']:,.0f} req/s, {cpu['this']:.0f} us gateway CPU/request\n"
        f"ratio this/other: {mean['this'] / mean['other']:.3f} req/s, {cpu['this'] / cpu['other']:.3f} CPU/request\n"
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f}, after "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg()[:2])} ({os.cpu_count()} CPUs); "
        f"finished {time.strftime('%H:%M:%S', time.gmtime())} UTC"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
