"""`switchyard rollout status [MODEL]` and `switchyard rollout {start,pause,resume,promote,abort} MODEL`:
the rollout admin API (gateway/observe/admin_rollouts.py) from a shell. Standard library
only (urllib), so the gateway pod's base install runs it."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

ACTIONS = ("start", "pause", "resume", "promote", "abort")
KEY_ENV = "SWITCHYARD_ADMIN_KEY"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rollout", help="read and steer rollouts through the admin API")
    rollout_sub = p.add_subparsers(dest="rollout_command", required=True)
    for name in ("status", *ACTIONS):
        helps = "show every rollout, or one model's with its evidence" if name == "status" else f"{name} a rollout"
        c = rollout_sub.add_parser(name, help=helps)
        c.add_argument("model", nargs="?" if name == "status" else None, help="the model under rollout")
        c.add_argument(
            "--url", default="http://127.0.0.1:8080", help="the listener serving /admin (the ops one if set)"
        )
        c.add_argument("--key", help=f"the admin key (default: ${KEY_ENV})")
        c.add_argument("--json", action="store_true", help="print the API's JSON")
        c.set_defaults(func=_run, action=None if name == "status" else name)


def _run(args: argparse.Namespace) -> int:
    key = args.key or os.environ.get(KEY_ENV, "")
    base = args.url.rstrip("/") + "/admin/rollouts"
    model = urllib.parse.quote(args.model, safe="/") if args.model else None
    if args.action:
        status, body = _call("POST", f"{base}/{model}/{args.action}", key)
    else:
        status, body = _call("GET", f"{base}/{model}" if model else base, key)
    if status != 200:
        message = body.get("error", {}).get("message", body) if isinstance(body, dict) else body
        print(f"HTTP {status}: {message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(body, indent=2))
    elif model:
        print(describe(body))
    else:
        print(table(body.get("data", [])))
    return 0


def _call(method: str, url: str, key: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw)
        except ValueError:
            return err.code, raw.decode(errors="replace")
    except urllib.error.URLError as err:
        return 0, f"cannot reach {url}: {err.reason}"


def table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no rollouts configured"
    lines = [f"{'MODEL':<28} {'PHASE':<12} {'STEP':>4} {'CANDIDATE':>9} {'MIRROR':>7}  ROLLOUT"]
    for r in rows:
        step = "-" if r.get("step") is None else str(r["step"])
        lines.append(
            f"{r['model']:<28} {r['phase']:<12} {step:>4} {r['candidate_share']:>9.0%} {r['mirror_share']:>7.0%}  "
            f"{r['rollout_id']}"
        )
    return "\n".join(lines)


def describe(body: dict[str, Any]) -> str:
    state = body["state"]
    steps = " -> ".join(f"{s:.0%}" for s in body["steps"])
    lines = [
        f"model {body['model']}: {state['phase']} (step {state['step']} of {steps}), "
        f"candidate {body['candidate_share']:.0%}, mirror {body['mirror_share']:.0%}",
        f"rollout {state['rollout_id']} version {state['version']}: {state['reason'] or '-'}",
    ]
    for window in body.get("evidence", []):
        lines.append(
            f"  window {window['window']} step {window['step']}: {window['decision']} "
            f"(stable {window['stable_n']}, candidate {window['candidate_n']}, mirror {window['mirror_n']})"
        )
        for gate in window["gates"]:
            if gate["verdict"] != "pass" or gate.get("n"):
                value = f" value {gate['value']:.4g}" if gate.get("value") is not None else ""
                limit = f" limit {gate['limit']:g}" if gate.get("limit") is not None else ""
                lines.append(f"    {gate['gate']:<26} {gate['verdict']:<12} n {gate['n']}{value}{limit}")
        lines.extend(f"    example: {e}" for e in window.get("examples", []))
    return "\n".join(lines)
