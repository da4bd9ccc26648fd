"""Soak: a gateway under mixed, disrupted traffic for a while, then a check that
it let go of everything and did not grow.

    python -m bench.soak                      # about 10 minutes (make soak)
    python -m bench.soak --duration 60 --out reports/soak/short

Starts, on loopback and through `processes`: a redis-server (the shared quota
store), two runtime simulators (vLLM and SGLang) behind one model, the native engine
(`builtin:tiny`) behind another, and a gateway. Three tenants with keys and quotas
send chat completions (bench/soak_load.py): streamed and not, some clients leaving
mid-stream, one tenant over its concurrency limit, one without max_tokens under a
tight token limit. A fourth, hostile, tenant sends the second adversity round's
attacks beside them (bench/soak_hostile.py: poison prompts, emoji, megabytes to
`/tokenize`, wide embeddings). At 40% of
the run the vLLM simulator is stopped and started again on its port, at 60%
Redis is killed and started again on its port.

At the end, once the traffic has stopped: every gauge of held work is back to
zero (the gateway's in-flight requests, quota leases and pending releases,
admission queue depth and in-flight, live tickets, each backend's in-flight,
and each runtime's own in-flight), the quota store is up, nothing but 200s and
429s came back to the other tenants once the disruptions had settled, their
non-streamed answers' p99 then stayed under `OTHERS_P99_S` (3 s; the runtimes take
about 0.45 s for 48 tokens), and the gateway's resident
memory grew by less than `--rss-limit-pct` (5%) from the end of the warm-up
(the first 20% of the run) to the end. Written to `soak.json` and `soak.md` in
`--out` (default reports/soak); the exit status is 0 when every check passed.

A client: HTTP, and child processes started through `processes`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from bench import soak_hostile
from bench.procs import Server, python_module
from bench.soak_hostile import Hostile
from bench.soak_load import Answer, Load, TenantLoad
from processes import Child, free_port, redis_ping, redis_server_argv

MODEL = "soak"
NATIVE_MODEL = "tiny"
OTHERS_P99_S = 3.0
FRUGAL_CAP = 24  # the runtimes write 48 tokens unless max_tokens says fewer
WARMUP_SHARE = 0.2
BACKEND_RESTART_AT = 0.4
REDIS_RESTART_AT = 0.6
# Gauges of work held; each sample (every label set) must read 0 when idle.
HELD_GAUGES = (
    "switchyard_inflight_requests",
    "switchyard_quota_leases_held",
    "switchyard_quota_pending_releases",
    "switchyard_admission_queue_depth",
    "switchyard_admission_inflight",
    "switchyard_live_tickets",
    "switchyard_backend_inflight",
)
TENANTS = {
    "steady": {"requests_per_minute": 100_000, "tokens_per_minute": 10_000_000, "max_concurrent": 32},
    "crowded": {"requests_per_minute": 100_000, "tokens_per_minute": 10_000_000, "max_concurrent": 3},
    "frugal": {"requests_per_minute": 100_000, "tokens_per_minute": 8_000, "max_tokens_cap": FRUGAL_CAP},
    soak_hostile.NAME: soak_hostile.LIMITS,
}
LOADS = [
    TenantLoad("steady", "sk-soak-steady", workers=6),
    TenantLoad("crowded", "sk-soak-crowded", workers=6),  # twice its concurrency limit: some 429s
    TenantLoad("frugal", "sk-soak-frugal", workers=3, max_tokens=None),  # no max_tokens: held to FRUGAL_CAP
]


class Fleet:
    """Redis, the two runtimes and the gateway, each restartable on its port."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.redis_port = free_port()
        self.sim_ports = {"vllm": free_port(), "sglang": free_port()}
        self.gateway_port = free_port()
        self.redis: Child | None = None
        self.sims: dict[str, Server] = {}
        self.gateway: Server | None = None
        self.restarts = Counter[str]()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    def start(self) -> None:
        self.start_redis()
        for kind in self.sim_ports:
            self.start_sim(kind)
        config_path = self.work / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(self.gateway_config()))
        self.gateway = Server(
            "gateway",
            python_module("gateway.cli", "serve", "--config", str(config_path)),
            self.url + "/readyz",
            self.work,
        ).__enter__()

    def start_redis(self) -> None:
        log = self.work / f"redis-{self.restarts['redis']}.log"
        self.redis = Child(redis_server_argv(self.redis_port, self.work), log, name="redis-server")
        self.redis.wait_ready(redis_ping(self.redis_port), timeout_s=30)

    def start_sim(self, kind: str) -> None:
        port = self.sim_ports[kind]
        argv = python_module(
            "simulators", kind, "--port", str(port), "--model-name", "soak-model", "--ttft-ms", "20",
            "--itl-ms", "8", "--output-tokens", "48",
        )  # fmt: skip
        name = f"sim-{kind}-{self.restarts[kind]}"
        self.sims[kind] = Server(name, argv, f"http://127.0.0.1:{port}/health", self.work).__enter__()

    def restart_sim(self, kind: str) -> None:
        """SIGTERM, a second without it, and the same runtime again on its port."""
        self.sims[kind].__exit__()
        time.sleep(1.0)
        self.restarts[kind] += 1
        self.start_sim(kind)

    def restart_redis(self) -> None:
        """SIGKILL (every key is lost), a second without it, a new empty one on its port."""
        assert self.redis is not None
        self.redis.kill()
        time.sleep(1.0)
        self.restarts["redis"] += 1
        self.start_redis()

    def gateway_config(self) -> dict:
        backends = [
            {"name": kind, "adapter": kind, "url": f"http://127.0.0.1:{port}", "served_model": "soak-model"}
            for kind, port in self.sim_ports.items()
        ]
        return {
            "listen": {"host": "127.0.0.1", "port": self.gateway_port},
            "auth": {
                "mode": "keys",
                "api_keys": [
                    {"sha256": hashlib.sha256(key.encode()).hexdigest(), "tenant": name}
                    for name, key in [(t.name, t.key) for t in LOADS] + [(soak_hostile.NAME, soak_hostile.KEY)]
                ],
            },
            "quota_store": {
                "kind": "redis",
                "url": f"redis://127.0.0.1:{self.redis_port}/0",
                "on_unavailable": "fail_open",
                "lease_ttl_s": 10,
            },
            "tenants": TENANTS,
            "admission": {"max_queue": 64, "max_queue_wait_s": 10},
            "models": {
                MODEL: {"backends": backends},
                NATIVE_MODEL: {"backends": [{"name": "native", "adapter": "native", "model_path": "builtin:tiny"}]},
            },
            "access_log": False,
        }

    def gateway_pid(self) -> int:
        assert self.gateway is not None and self.gateway.child is not None
        return self.gateway.child.pid

    def stop(self) -> None:
        for server in [self.gateway, *self.sims.values()]:
            if server is not None:
                server.__exit__()
        if self.redis is not None:
            self.redis.stop()


@dataclass
class Observed:
    """What one run saw, from which the report and its checks are made."""

    duration_s: float
    answers: list[Answer]
    events: list[dict]
    rss: list[tuple[float, int]]  # (seconds into the run, kB)
    warm_rss_kb: int
    final_rss_kb: int
    end_metrics: dict[str, float]
    runtime_in_flight: dict[str, int]
    settled_from_s: float
    idle_after_s: float


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


async def metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def held(samples: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in samples.items() if k.split("{")[0] in HELD_GAUGES}


async def run(duration_s: float, out: Path, rss_limit_pct: float) -> dict:
    fleet = Fleet(out)
    events: list[dict] = []
    rss: list[tuple[float, int]] = []
    try:
        await asyncio.to_thread(fleet.start)
        load = Load(fleet.url, MODEL, LOADS)
        pid = fleet.gateway_pid()

        def note(what: str) -> None:
            events.append({"at_s": round(time.monotonic() - load.started, 1), "what": what})
            print(f"[soak] {events[-1]['at_s']:7.1f}s {what}", flush=True)

        async def sample_rss() -> None:
            interval = max(1.0, min(5.0, duration_s / 100))
            while True:
                rss.append((round(time.monotonic() - load.started, 1), rss_kb(pid)))
                await asyncio.sleep(interval)

        async def at(share: float) -> None:
            await asyncio.sleep(max(0.0, load.started + share * duration_s - time.monotonic()))

        async def timeline() -> float:
            await at(WARMUP_SHARE)
            warm_rss = rss_kb(pid)
            note(f"warm-up over: gateway RSS {warm_rss} kB")
            await at(BACKEND_RESTART_AT)
            note("vLLM simulator stopping")
            await asyncio.to_thread(fleet.restart_sim, "vllm")
            note("vLLM simulator back on its port")
            await at(REDIS_RESTART_AT)
            note("Redis killed")
            await asyncio.to_thread(fleet.restart_redis)
            note("Redis back on its port (empty)")
            await at(1.0)
            load.stop()
            note("traffic stopping")
            return warm_rss

        sampler = asyncio.create_task(sample_rss())
        note(f"traffic starting: {sum(t.workers for t in LOADS)} clients, {duration_s:g} s")
        hostile = Hostile(fleet.url, load, MODEL, NATIVE_MODEL)
        warm_rss, _, _ = await asyncio.gather(timeline(), load.run(), hostile.run())
        settled_from = max(e["at_s"] for e in events if e["what"].startswith("Redis back")) + max(2.0, 0.1 * duration_s)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            idle_after = await wait_idle(session, fleet.url)
            sampler.cancel()
            end = await metrics(session, fleet.url)
            runtimes = {kind: await sim_in_flight(session, s.base_url) for kind, s in fleet.sims.items()}
        final_rss = rss_kb(pid)
        note(f"idle after {idle_after:.1f} s; gateway RSS {final_rss} kB")
        observed = Observed(
            duration_s, load.answers, events, rss, warm_rss, final_rss, end, runtimes, settled_from, idle_after
        )
        return build_report(observed, rss_limit_pct)
    finally:
        await asyncio.to_thread(fleet.stop)


async def wait_idle(session: aiohttp.ClientSession, url: str, bound_s: float = 60.0) -> float:
    """Seconds until every held-work gauge reads 0 (or `bound_s`, after which the report says what was left)."""
    start = time.monotonic()
    while time.monotonic() - start < bound_s:
        if not any(held(await metrics(session, url)).values()):
            break
        await asyncio.sleep(0.25)
    return time.monotonic() - start


async def sim_in_flight(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url + "/_sim/stats") as resp:
        return int((await resp.json())["in_flight"])


def build_report(o: Observed, rss_limit_pct: float) -> dict:
    by_tenant: dict[str, Counter] = {t.name: Counter() for t in LOADS}
    hostile: dict[str, Counter] = {}
    for a in o.answers:
        if a.tenant == soak_hostile.NAME:
            hostile.setdefault(a.kind, Counter())[a.outcome] += 1
            continue
        by_tenant[a.tenant][a.outcome] += 1
        by_tenant[a.tenant][f"kind:{a.kind}"] += 1
    others = [a for a in o.answers if a.tenant != soak_hostile.NAME and a.at_s >= o.settled_from_s]
    late_failures = Counter(a.outcome for a in others if a.outcome not in ("ok", "cancelled", "429"))
    took = sorted(a.took_s for a in others if a.kind == "json" and a.outcome == "ok")
    others_p99 = took[min(len(took) - 1, int(0.99 * len(took)))] if took else float("inf")
    frugal = [a.completion_tokens for a in o.answers if a.tenant == "frugal" and a.completion_tokens is not None]
    growth = 100.0 * (o.final_rss_kb - o.warm_rss_kb) / o.warm_rss_kb
    left = {k: v for k, v in held(o.end_metrics).items() if v}
    checks = {
        "held_gauges_back_to_zero": not left,
        "runtimes_idle": not any(o.runtime_in_flight.values()),
        "quota_store_up": o.end_metrics.get("switchyard_quota_store_up") == 1.0,
        f"rss_growth_under_{rss_limit_pct:g}pct": growth < rss_limit_pct,
        "only_200_and_429_once_settled": not late_failures,
        f"others_p99_under_{OTHERS_P99_S:g}s_once_settled": others_p99 < OTHERS_P99_S,
        "every_hostile_attack_ran": len(hostile) == len(soak_hostile.attacks(MODEL, NATIVE_MODEL)),
        "no_max_tokens_held_to_the_reservation": bool(frugal) and max(frugal) <= FRUGAL_CAP,
        "every_kind_of_traffic_ran": all(
            c["ok"] and c["kind:json"] and c["kind:stream"] and c["kind:cancel"] for c in by_tenant.values()
        ),
    }
    return {
        "passed": all(checks.values()),
        "checks": checks,
        "duration_s": o.duration_s,
        "requests": len(o.answers),
        "requests_per_s": round(len(o.answers) / o.duration_s, 1),
        "by_tenant": {t: dict(c) for t, c in by_tenant.items()},
        "hostile_by_attack": {k: dict(c) for k, c in hostile.items()},
        "others_p99_s_once_settled": round(others_p99, 3),
        "failures_once_settled": dict(late_failures),
        "settled_from_s": o.settled_from_s,
        "events": o.events,
        "idle_after_s": round(o.idle_after_s, 2),
        "held_gauges_at_end": held(o.end_metrics),
        "held_gauges_not_zero": left,
        "runtime_in_flight_at_end": o.runtime_in_flight,
        "rss_kb": {
            "after_warmup": o.warm_rss_kb,
            "final": o.final_rss_kb,
            "max": max(v for _, v in o.rss),
            "growth_pct": round(growth, 2),
        },
        "rss_samples": o.rss,
        "tenants": TENANTS,
    }


def write_markdown(report: dict, path: Path) -> None:
    lines = [
        f"# Soak: {'PASSED' if report['passed'] else 'FAILED'}",
        "",
        f"{report['duration_s']:g} s, {report['requests']} requests ({report['requests_per_s']}/s), "
        f"idle {report['idle_after_s']} s after the traffic stopped.",
        "",
        "| check | result |",
        "| --- | --- |",
        *(f"| {name} | {'pass' if ok else 'FAIL'} |" for name, ok in report["checks"].items()),
        "",
        "## Gateway memory (RSS)",
        "",
        "| after warm-up | final | max | growth |",
        "| --- | --- | --- | --- |",
        "| {after_warmup} kB | {final} kB | {max} kB | {growth_pct:.2f}% |".format(**report["rss_kb"]),
        "",
        "## Events",
        "",
        *(f"- {e['at_s']} s: {e['what']}" for e in report["events"]),
        "",
        "## Answers per tenant",
        "",
        *(f"- {t}: {json.dumps(c, sort_keys=True)}" for t, c in report["by_tenant"].items()),
        *(f"- hostile, {k}: {json.dumps(c, sort_keys=True)}" for k, c in report["hostile_by_attack"].items()),
        "",
        f"Other tenants' non-streamed p99 once settled: {report['others_p99_s_once_settled']} s.",
        f"Failures once settled (from {report['settled_from_s']:.1f} s): {report['failures_once_settled'] or 'none'}.",
        f"Held gauges not zero at the end: {report['held_gauges_not_zero'] or 'none'}.",
        "",
    ]
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of traffic (default 600)")
    parser.add_argument("--out", type=Path, default=Path("reports/soak"))
    parser.add_argument("--rss-limit-pct", type=float, default=5.0, help="allowed RSS growth after the warm-up")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(run(args.duration, args.out.resolve(), args.rss_limit_pct))
    (args.out / "soak.json").write_text(json.dumps(report, indent=2))
    write_markdown(report, args.out / "soak.md")
    print((args.out / "soak.md").read_text())
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
