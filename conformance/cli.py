"""`switchyard conformance run | matrix | diff | list`.

Exit codes (conformance/README.md, "Verdicts and exit codes"): 0 PASS, 1 a MUST
failed or errored, 2 a usage error (one line on stderr, never a traceback),
3 INCOMPLETE (no MUST failed, but a MUST that applies did not run) unless
`--allow-incomplete`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance.capabilities import FEATURES
from conformance.check import PROFILES

EXIT_OK, EXIT_MUST_FAILED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


class UsageError(Exception):
    """A mistake in how the suite was called (a path, an option, a config)."""


def _user_errors(cmd: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """One clear line and exit 2 for a usage error, whatever the command."""

    @functools.wraps(cmd)
    def run(args: argparse.Namespace) -> int:
        try:
            return cmd(args)
        except UsageError as exc:
            print(f"switchyard conformance: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run


def _profiles(values: list[str] | None) -> list[str]:
    chosen: list[str] = []
    for v in values or list(PROFILES):
        for p in v.split(","):
            p = p.strip()
            if p not in PROFILES:
                raise UsageError(f"unknown profile {p!r}; choose from {', '.join(PROFILES)}")
            if p not in chosen:
                chosen.append(p)
    return chosen


def _exit_code(verdict: Any, allow_incomplete: bool) -> int:
    from conformance.result import Verdict

    if verdict is Verdict.FAIL:
        return EXIT_MUST_FAILED
    if verdict is Verdict.INCOMPLETE and not allow_incomplete:
        return EXIT_INCOMPLETE
    return EXIT_OK


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
        "timeout_s": args.timeout,
    }


def _report_dir(path: str) -> Path:
    directory = Path(path).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--report {path}: cannot create the directory ({exc.strerror or exc})") from None
    return directory


@_user_errors
def cmd_run(args: argparse.Namespace) -> int:
    from conformance.capabilities import UnknownCapability, parse_features
    from conformance.catalog import select
    from conformance.report import summary_line, write_reports
    from conformance.runner import run_checks
    from conformance.target import Target

    profiles = _profiles(args.profile)
    try:
        capabilities = parse_features(args.capabilities) if args.capabilities is not None else None
    except UnknownCapability as exc:
        raise UsageError(f"--capabilities: {exc}") from None
    target = Target(
        base_url=args.base_url,
        model=args.model,
        name=args.name or "",
        api_key=args.api_key,
        sim_faults=args.sim_faults,
        capabilities=capabilities,
        **_gateway_options(args),
    )
    checks = select(profiles, args.only)
    if not checks:
        raise UsageError("no checks selected (see `switchyard conformance list`)")
    report_dir = _report_dir(args.report)
    report = asyncio.run(run_checks(target, checks, profiles, progress=None if args.quiet else _progress()))
    paths = write_reports(report, report_dir, f"Conformance report: {target.name}")
    print(f"{report.verdict}: {summary_line(report)}")
    print("reports: " + ", ".join(str(p) for p in paths.values()))
    if report.must_failures:
        print(
            f"FAIL: {len(report.must_failures)} MUST check(s) failed: " + ", ".join(r.id for r in report.must_failures),
            file=sys.stderr,
        )
    elif report.must_skips:
        print(
            f"INCOMPLETE: {len(report.must_skips)} MUST check(s) did not run: "
            + ", ".join(r.id for r in report.must_skips)
            + " (give what they need, declare what the target lacks with --capabilities, or --allow-incomplete)",
            file=sys.stderr,
        )
    return _exit_code(report.verdict, args.allow_incomplete)


def _start_gateway(config_path: Path, report_dir: Path) -> Any:
    from conformance.procs import ChildFailed, free_port, start_gateway

    log_dir = report_dir / "logs"
    try:
        # In the caller's directory, so relative paths inside the config mean what
        # they mean to `switchyard serve` run here.
        return start_gateway(config_path, free_port(), log_dir, cwd=Path.cwd())
    except ChildFailed as exc:
        lines = [line for line in exc.log_tail.splitlines() if line.strip()]
        last = f": {lines[-1].strip()}" if lines else ""
        raise UsageError(
            f"the gateway did not start with {config_path}{last} (log: {log_dir / 'gateway.log'})"
        ) from None


@_user_errors
def cmd_matrix(args: argparse.Namespace) -> int:
    from conformance.catalog import select
    from conformance.matrix import (
        ConfigError,
        gateway_url_of,
        load_config,
        load_declarations,
        run_matrix,
        select_models,
        targets_from_config,
        write_matrix,
    )

    if args.sim_faults:
        raise UsageError(
            "matrix: --sim-faults would send fault markers to every model; declare `simulator: true` "
            "for the simulator models in --targets FILE (conformance/README.md)"
        )
    profiles = _profiles(args.profile)
    # Resolved here: the gateway may run in another directory than the caller's.
    config_path = Path(args.config).expanduser().resolve()
    try:
        config = load_config(config_path)
        declarations = load_declarations(Path(args.targets).expanduser().resolve(), config) if args.targets else {}
        models = select_models(config, [m.strip() for m in args.models.split(",")] if args.models else None)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    checks = select(profiles, args.only)
    if not checks:
        raise UsageError("no checks selected (see `switchyard conformance list`)")
    report_dir = _report_dir(args.report)
    gateway = _start_gateway(config_path, report_dir) if args.start_gateway else None
    try:
        targets = targets_from_config(
            config,
            gateway.url if gateway is not None else args.gateway_url or gateway_url_of(config),
            direct=args.direct,
            api_key=args.api_key,
            models=models,
            declarations=declarations,
            **_gateway_options(args),
        )
        matrix = asyncio.run(
            run_matrix(
                targets,
                checks,
                profiles,
                progress=None if args.quiet else lambda t, r: _progress(f"[{t.name}] ")(r),
            )
        )
    finally:
        if gateway is not None:
            gateway.stop()
    paths = write_matrix(matrix, report_dir)
    print(f"{matrix.verdict} (gateway columns)")
    print("reports: " + ", ".join(str(p) for p in paths.values()))
    failures = matrix.gateway_must_failures()
    if failures:
        print(
            f"FAIL: {len(failures)} MUST failure(s) through the gateway: "
            + ", ".join(f"{name}:{r.id}" for name, r in failures),
            file=sys.stderr,
        )
    for name, run in matrix.incomplete_gateway_columns():
        print(
            f"INCOMPLETE: {name}: MUST check(s) did not run: {', '.join(r.id for r in run.must_skips) or 'none ran'}",
            file=sys.stderr,
        )
    return _exit_code(matrix.verdict, args.allow_incomplete)


@_user_errors
def cmd_diff(args: argparse.Namespace) -> int:
    from conformance.diff import diff_reports, load, render

    try:
        old, new = load(Path(args.old)), load(Path(args.new))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    d = diff_reports(old, new)
    print(render(d))
    return EXIT_MUST_FAILED if d.new_must_failures or d.lost_must else EXIT_OK


@_user_errors
def cmd_list(args: argparse.Namespace) -> int:
    from conformance.catalog import select

    for c in select(_profiles(args.profile) if args.profile else None):
        needs = f" [needs {', '.join(c.needs)}]" if c.needs else ""
        print(f"{c.id:40} {c.level:6} {c.profile:10} {c.description}{needs}")
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
    p.add_argument(
        "--forbidden-model", help="gateway: a configured model the --api-key may not use (answered as missing: 404)"
    )
    p.add_argument("--rate-limited-key", help="gateway: a key whose tenant allows only a few requests per minute (429)")
    p.add_argument("--overload-model", help="gateway: a model whose queue overflows under a burst (503)")
    p.add_argument("--metrics-url", help="Prometheus endpoint with a running-requests gauge (cancellation check)")
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds")
    p.add_argument(
        "--allow-incomplete",
        action="store_true",
        help=f"exit {EXIT_OK} instead of {EXIT_INCOMPLETE} when the verdict is INCOMPLETE (the reports still say so)",
    )
    p.add_argument("--quiet", action="store_true", help="no per-check progress lines")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("conformance", help="OpenAI-semantics conformance suite (run, matrix, diff)")
    sub = parser.add_subparsers(dest="conformance_command", required=True)

    run = sub.add_parser("run", help="run the suite against one server; exits 1 on a MUST failure, 3 if incomplete")
    run.add_argument("--base-url", required=True, help="http://host:port or http://host:port/v1")
    run.add_argument("--model", required=True, help="the model name to send")
    run.add_argument("--name", help="label for the reports (default: the base URL)")
    run.add_argument(
        "--sim-faults",
        action="store_true",
        help="the server is a simulator, or a gateway in front of one: it understands the [[sim:...]] fault markers "
        "(without it the fault checks are not applicable)",
    )
    run.add_argument(
        "--capabilities",
        metavar="LIST",
        help="the optional features the server has, comma-separated, from: "
        + ", ".join(FEATURES)
        + " (an empty string for none); checks needing one not listed are not applicable (default: all)",
    )
    _add_target_options(run)
    run.set_defaults(func=cmd_run)

    matrix = sub.add_parser("matrix", help="run every configured model through the gateway (and runtimes directly)")
    matrix.add_argument("--config", required=True, help="the gateway's YAML config")
    matrix.add_argument("--gateway-url", help="where the gateway listens (default: the config's listen address)")
    matrix.add_argument("--start-gateway", action="store_true", help="start `switchyard serve --config` on a free port")
    matrix.add_argument("--direct", action="store_true", help="also run each runtime's URL directly")
    matrix.add_argument("--models", help="comma-separated subset of the configured model names")
    matrix.add_argument(
        "--targets",
        metavar="FILE",
        help="YAML declaring per model `simulator: true|false` and `capabilities: [...]` (conformance/README.md)",
    )
    # Only to explain, in one line, that simulators are declared per model here.
    matrix.add_argument("--sim-faults", action="store_true", help=argparse.SUPPRESS)
    _add_target_options(matrix)
    matrix.set_defaults(func=cmd_matrix)

    listing = sub.add_parser("list", help="list the checks: id, level, profile, description")
    listing.add_argument("--profile", action="append", metavar="|".join(PROFILES))
    listing.set_defaults(func=cmd_list)

    diff = sub.add_parser(
        "diff", help="lost MUST coverage, regressions and fixes between two reports; exits 1 on either blocking kind"
    )
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
