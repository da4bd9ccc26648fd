"""`switchyard conformance run | matrix | diff`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from conformance.check import PROFILES

EXIT_OK, EXIT_MUST_FAILED, EXIT_USAGE = 0, 1, 2


def _profiles(values: list[str] | None) -> list[str]:
    chosen: list[str] = []
    for v in values or list(PROFILES):
        for p in v.split(","):
            p = p.strip()
            if p not in PROFILES:
                raise SystemExit(f"unknown profile {p!r}; choose from {', '.join(PROFILES)}")
            if p not in chosen:
                chosen.append(p)
    return chosen


def _progress(prefix: str = "") -> Any:
    def show(result: Any) -> None:
        line = f"{prefix}{result.status:5} {result.level:6} {result.id}"
        if result.message and result.status != "pass":
            line += f" — {result.message[:160]}"
        print(line, flush=True)

    return show


def _gateway_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "bad_api_key": args.bad_api_key,
        "forbidden_model": args.forbidden_model,
        "rate_limited_key": args.rate_limited_key,
        "overload_model": args.overload_model,
        "metrics_url": args.metrics_url,
        "sim_faults": args.sim_faults,
        "timeout_s": args.timeout,
    }


def cmd_run(args: argparse.Namespace) -> int:
    from conformance.catalog import select
    from conformance.report import summary_line, write_reports
    from conformance.runner import run_checks
    from conformance.target import Target

    profiles = _profiles(args.profile)
    target = Target(
        base_url=args.base_url, model=args.model, name=args.name or "", api_key=args.api_key, **_gateway_options(args)
    )
    checks = select(profiles, args.only)
    if not checks:
        print("no checks selected", file=sys.stderr)
        return EXIT_USAGE
    report = asyncio.run(run_checks(target, checks, profiles, progress=None if args.quiet else _progress()))
    paths = write_reports(report, Path(args.report), f"Conformance report: {target.name}")
    print(summary_line(report))
    print("reports: " + ", ".join(str(p) for p in paths.values()))
    if report.must_failures:
        print(
            f"FAIL: {len(report.must_failures)} MUST check(s) failed: " + ", ".join(r.id for r in report.must_failures),
            file=sys.stderr,
        )
        return EXIT_MUST_FAILED
    return EXIT_OK


def cmd_matrix(args: argparse.Namespace) -> int:
    from conformance.catalog import select
    from conformance.matrix import gateway_url_of, load_config, run_matrix, targets_from_config, write_matrix
    from conformance.procs import free_port, start_gateway

    config_path = Path(args.config)
    config = load_config(config_path)
    profiles = _profiles(args.profile)
    gateway = None
    if args.start_gateway:
        port = free_port()
        gateway = start_gateway(config_path, port, Path(args.report) / "logs")
        gateway_url = gateway.url
    else:
        gateway_url = args.gateway_url or gateway_url_of(config)
    try:
        targets = targets_from_config(
            config,
            gateway_url,
            direct=args.direct,
            api_key=args.api_key,
            models=args.models.split(",") if args.models else None,
            **_gateway_options(args),
        )
        matrix = asyncio.run(
            run_matrix(
                targets,
                select(profiles, args.only),
                profiles,
                progress=None if args.quiet else lambda t, r: _progress(f"[{t.name}] ")(r),
            )
        )
    finally:
        if gateway is not None:
            gateway.stop()
    paths = write_matrix(matrix, Path(args.report))
    print("reports: " + ", ".join(str(p) for p in paths.values()))
    failures = matrix.gateway_must_failures()
    if failures:
        print(
            f"FAIL: {len(failures)} MUST failure(s) through the gateway: "
            + ", ".join(f"{name}:{r.id}" for name, r in failures),
            file=sys.stderr,
        )
        return EXIT_MUST_FAILED
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from conformance.diff import diff_reports, load, render

    d = diff_reports(load(Path(args.old)), load(Path(args.new)))
    print(render(d))
    return EXIT_MUST_FAILED if d.new_must_failures else EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from conformance.catalog import select

    for c in select(_profiles(args.profile) if args.profile else None):
        print(f"{c.id:40} {c.level:6} {c.profile:10} {c.description}")
    return EXIT_OK


def _add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api-key", help="the key to call with (gateway profile: a gateway with auth on)")
    p.add_argument(
        "--profile",
        action="append",
        metavar="|".join(PROFILES),
        help="profile(s) to run, repeatable or comma-separated (default: all)",
    )
    p.add_argument("--only", action="append", help="check id or id prefix (e.g. stream.) to run; repeatable")
    p.add_argument("--report", required=True, help="directory for the JSON, Markdown and HTML reports")
    p.add_argument("--bad-api-key", help="gateway: a key that must be refused (default: a random one)")
    p.add_argument("--forbidden-model", help="gateway: a configured model the --api-key may not use (403)")
    p.add_argument("--rate-limited-key", help="gateway: a key whose tenant allows only a few requests per minute (429)")
    p.add_argument("--overload-model", help="gateway: a model whose queue overflows under a burst (503)")
    p.add_argument("--metrics-url", help="Prometheus endpoint with a running-requests gauge (cancellation check)")
    p.add_argument(
        "--sim-faults",
        action="store_true",
        help="the server understands the simulators' [[sim:...]] fault markers (failure checks)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds")
    p.add_argument("--quiet", action="store_true", help="no per-check progress lines")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("conformance", help="OpenAI-semantics conformance suite (run, matrix, diff)")
    sub = parser.add_subparsers(dest="conformance_command", required=True)

    run = sub.add_parser("run", help="run the suite against one server; exits 1 on a MUST failure")
    run.add_argument("--base-url", required=True, help="http://host:port or http://host:port/v1")
    run.add_argument("--model", required=True, help="the model name to send")
    run.add_argument("--name", help="label for the reports (default: the base URL)")
    _add_target_options(run)
    run.set_defaults(func=cmd_run)

    matrix = sub.add_parser("matrix", help="run every configured model through the gateway (and runtimes directly)")
    matrix.add_argument("--config", required=True, help="the gateway's YAML config")
    matrix.add_argument("--gateway-url", help="where the gateway listens (default: the config's listen address)")
    matrix.add_argument("--start-gateway", action="store_true", help="start `switchyard serve --config` on a free port")
    matrix.add_argument("--direct", action="store_true", help="also run each runtime's URL directly")
    matrix.add_argument("--models", help="comma-separated subset of the configured model names")
    _add_target_options(matrix)
    matrix.set_defaults(func=cmd_matrix)

    listing = sub.add_parser("list", help="list the checks: id, level, profile, description")
    listing.add_argument("--profile", action="append", metavar="|".join(PROFILES))
    listing.set_defaults(func=cmd_list)

    diff = sub.add_parser("diff", help="regressions and fixes between two reports; exits 1 on a new MUST failure")
    diff.add_argument("old", help="the earlier report.json or matrix.json")
    diff.add_argument("new", help="the later report.json or matrix.json")
    diff.set_defaults(func=cmd_diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.cli")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
