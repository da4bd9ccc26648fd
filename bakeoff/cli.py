"""`switchyard bakeoff run PLAN.yaml --report DIR` and `switchyard bakeoff compare A B`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bakeoff", help="choose a runtime by measurement (docs/bakeoff.md)")
    sub = p.add_subparsers(dest="bakeoff_command", required=True)
    r = sub.add_parser("run", help="eliminate, check comparability, measure and check every candidate of a plan")
    r.add_argument("plan", type=Path, help="the plan (YAML; docs/bakeoff.md)")
    r.add_argument("--report", type=Path, help="report folder (default reports/bakeoff/<time>)")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--no-plots", action="store_true")
    r.set_defaults(func=_run)
    c = sub.add_parser("compare", help="two reports (before and after), regressions first")
    c.add_argument("a", type=Path, help="report folder or report.json (before)")
    c.add_argument("b", type=Path, help="report folder or report.json (after)")
    c.add_argument("--tolerance", type=float, default=None, help="relative change counted as unchanged (0.25)")
    c.add_argument("--out", type=Path, help="also write the comparison as Markdown here")
    c.set_defaults(func=_compare)


def _run(args: argparse.Namespace) -> int:
    from bakeoff.plan import PlanError, load_plan
    from bakeoff.report import write
    from bakeoff.run import Stopped, run

    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        print(f"switchyard bakeoff: {exc}", file=sys.stderr)
        return 2
    out = args.report or Path("reports/bakeoff") / time.strftime("%Y%m%d-%H%M%S")
    try:
        doc = run(plan, args.plan.read_text(), args.plan.resolve().parent, progress=not args.no_progress)
    except Stopped as exc:
        print(
            f"switchyard bakeoff: stopped by {exc}; every runtime and gateway it started was stopped", file=sys.stderr
        )
        return 130
    paths = write(doc, out, plots=not args.no_plots)
    print(f"report written: {', '.join(str(p) for p in paths[:3])}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from bakeoff.compare import DEFAULT_TOLERANCE, compare, load, markdown

    tol = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    try:
        rows = compare(load(args.a), load(args.b), tol)
    except (OSError, ValueError) as exc:
        print(f"switchyard bakeoff compare: {exc}", file=sys.stderr)
        return 2
    text = markdown(rows, str(args.a), str(args.b), tol)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 1 if any(r["kind"] == "regression" for r in rows) else 0
