"""Mutation testing over the core modules (`make mutation`; docs/mutation/README.md).

Each module is mutated by mutmut in a private copy of the repository
(reports/mutation/<module>/), against ONLY the fast in-process tests in MODULES: a
mutant is judged by the tests meant to pin that module, not by the whole suite, so a
run stays affordable on a small machine and a score says what those tests catch.

Results accumulate in docs/mutation/results/<module>.json (one file per module, replaced
when the module is run again, so runs side by side never overwrite each other) and
docs/mutation/report.md is rendered from them, with every survivor's file:line, its
mutation, and the reason recorded for it in docs/mutation/survivors.toml or
docs/mutation/survivors/*.toml (equivalent, or not worth a test, and why).

    python scripts/mutation.py                    # every module, one at a time
    python scripts/mutation.py policies/quota.py  # one module
    python scripts/mutation.py --report           # re-render report.md only
    python scripts/mutation.py --collect MODULE   # score a finished copy again, without a run
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from mutation_fresh import code_digest, stale
from mutation_table import EXTRA_ARGS, MODULES, NOTES, OUT_OF_SCOPE, SCOPE, TIMEOUTS  # scripts/ is sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "reports" / "mutation"
DOCS = ROOT / "docs" / "mutation"
RESULTS = DOCS / "results"
REASONS = [DOCS / "survivors.toml", DOCS / "survivors"]
REPORT = DOCS / "report.md"
GOAL = 0.85


# mutmut's exit codes per mutant (mutmut.stats.status_by_exit_code)
KILLED = {1, 3, -11, -9, 36, 24, -24, 152, 255, 37}  # failed, crashed, timed out, caught by types
# of which timed out: a mutant that loops, or one starved of CPU by other work on the machine (a wall-clock limit),
# so a module's timeouts are counted apart and can be judged against the load of its run
TIMED_OUT = {36, 24, -24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}  # no test reaches the mutated function
SKIPPED = {34}


def slug(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    return [p for p in out.decode().split("\0") if p]


def tests_of(patterns: list[str]) -> list[str]:
    return sorted({str(p.relative_to(ROOT)) for pattern in patterns for p in ROOT.glob(pattern)})


def prepare(module: str, patterns: list[str]) -> tuple[Path, list[str]]:
    """A private copy of the repository with a [tool.mutmut] section for this module."""
    tests = tests_of(patterns)
    if not tests:
        raise SystemExit(f"{module}: no test file matches {patterns}")
    work = WORK / slug(module)
    shutil.rmtree(work, ignore_errors=True)
    for rel in tracked_files():
        src = ROOT / rel
        if not src.is_file():
            continue
        dst = work / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    package = module.split("/")[0]
    others = sorted({p.split("/")[0] for p in tracked_files() if "/" in p} - {package, "tests", ".ci", "docs"})
    section = {
        "source_paths": [package + "/"],
        "only_mutate": [module],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", *EXTRA_ARGS.get(module, [])],
        "also_copy": [o + "/" for o in others],
        # a mutant that makes a test loop is killed after 10x its clean run (+3 s)
        "timeout_multiplier": TIMEOUTS.get(module, (10.0, 3.0))[0],
        "timeout_constant": TIMEOUTS.get(module, (10.0, 3.0))[1],
        "use_git_change_detection": False,
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in section.items()]
    with (work / "pyproject.toml").open("a") as f:
        f.write("\n".join(lines) + "\n")
    return work, tests


def mutmut(work: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """mutmut in a session of its own, its output in a file: a mutant's test may leave a process
    behind (a forked worker paused for a signal that never comes) that would hold a pipe open and
    the run with it; whatever is left in the session is ended with the run."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(work))
    exe = Path(sys.executable).with_name("mutmut")
    log = work / f"mutmut-{args[0]}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(exe), *args], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            end_session(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, log.read_text(errors="replace"), "")


def end_session(sid: int) -> None:
    """SIGKILL every process left in session `sid` (the mutants' orphans)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) == sid:
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            pass  # gone meanwhile


def function_span(source: str, mutant: str) -> tuple[str, int, int]:
    """(qualified name, first line, last line) of the function a mutant name points at."""
    body = mutant.rpartition(".x")[2].split("__mutmut_")[0]
    if body.startswith("ǁ"):
        cls, _, fn = body[1:].partition("ǁ")
        qual = f"{cls}.{fn}"
    else:
        cls, fn = "", body.removeprefix("_")
        qual = fn
    tree = ast.parse(source)
    scopes = [tree]
    if cls:
        scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
    for scope in scopes:
        for node in ast.iter_child_nodes(scope):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == fn:
                return qual, node.lineno, node.end_lineno or node.lineno
    return qual, 1, len(source.splitlines())


# Run inside a module's copy: the diff of each named mutant, as JSON (one process for
# all of them; `mutmut show` per mutant costs a process start each).
_DIFFS = """
import json, sys
from mutmut.__main__ import *  # noqa: F403 (loads mutmut's configuration as its CLI does)
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({name: get_diff_for_mutant(name) for name in json.loads(sys.stdin.read())}))
"""


def diffs(work: Path, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    env = dict(os.environ, PYTHONPATH=str(work))
    proc = subprocess.run(
        [sys.executable, "-c", _DIFFS], cwd=work, env=env, input=json.dumps(names), capture_output=True, text=True
    )
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return {name: mutmut(work, "show", name).stdout for name in names}


def _hunk_lines(diff: str) -> list[str]:
    """The function's lines as the diff numbers them, from its first line: the
    context and removed lines of its hunks, placed by the hunk headers."""
    out: list[str] = []
    for ln in diff.splitlines():
        m = re.match(r"^@@ -(\d+)", ln)
        if m:
            out += [" "] * (int(m.group(1)) - 1 - len(out))
        elif ln.startswith((" ", "-")) and not ln.startswith("---"):
            out.append(ln)
    return out


def describe(diff: str, mutant: str, source: str) -> dict:
    """file:line and the changed lines of one mutant, from its diff."""
    removed = [ln[1:] for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    qual, first, last = function_span(source, mutant)
    lines = source.splitlines()
    line = first
    if removed:
        # the same text may occur twice in a function: take the occurrence nearest to
        # where the diff's hunk places it (mutmut's function text can be a line off)
        expected = first
        for n, ln in enumerate(_hunk_lines(diff)):
            if ln.startswith("-"):
                expected = first + n
                break
        want = removed[0].strip()
        hits = [i + 1 for i in range(first - 1, min(last, len(lines))) if lines[i].strip() == want]
        if hits:
            line = min(hits, key=lambda h: abs(h - expected))
    return {
        "mutant": mutant,
        "function": qual,
        "line": line,
        "original": " / ".join(s.strip() for s in removed),
        "mutated": " / ".join(s.strip() for s in added),
    }


def run_module(module: str, max_children: int, budget: float) -> dict:
    work, tests = prepare(module, MODULES[module])
    started = time.monotonic()
    try:
        proc = mutmut(work, "run", "--max-children", str(max_children), timeout=budget)
        tail = (proc.stdout + proc.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        tail = f"stopped after the {budget:.0f} s budget"
    return collect(module, work, tests, time.monotonic() - started, tail)


def recollect(module: str) -> dict:
    """The score of `module`'s finished copy, without a run; its time is the copy's making
    to mutmut's last write of its results."""
    work = WORK / slug(module)
    made, ended = (work / "pyproject.toml").stat().st_mtime, (work / "mutants" / (module + ".meta")).stat().st_mtime
    return collect(module, work, tests_of(MODULES[module]), ended - made)


def collect(module: str, work: Path, tests: list[str], seconds: float, tail: str = "") -> dict:
    """The score of the run in `work` (mutmut's results file there), against `module` as it is now."""
    meta_path = work / "mutants" / (module + ".meta")
    if not meta_path.exists():
        raise SystemExit(f"{module}: mutmut produced no results\n{tail}")
    codes: dict[str, int | None] = json.loads(meta_path.read_text())["exit_code_by_key"]
    source = (ROOT / module).read_text()
    counts = {"killed": 0, "survived": 0, "no_tests": 0, "not_run": 0, "skipped": 0}
    survivors = []
    timed_out = 0
    for name, code in sorted(codes.items(), key=lambda kv: _mutant_order(kv[0])):
        if code in KILLED:
            counts["killed"] += 1
            timed_out += code in TIMED_OUT
        elif code in SKIPPED:
            counts["skipped"] += 1
        else:
            key = "survived" if code in SURVIVED else "no_tests" if code in NO_TESTS else "not_run"
            counts[key] += 1
            survivors.append({"mutant": name, "status": key.replace("_", " ")})
    found = diffs(work, [s["mutant"] for s in survivors])
    survivors = [describe(found.get(s["mutant"], ""), s["mutant"], source) | s for s in survivors]
    survivors.sort(key=lambda s: (s["line"], s["mutant"]))
    total = sum(counts.values()) - counts["skipped"]
    return {
        "tests": tests,
        "counts": counts,
        "total": total,
        "score": round(counts["killed"] / total, 4) if total else 1.0,
        "code": code_digest(source),
        "timed_out": timed_out,
        "load": round(os.getloadavg()[0], 1),
        "seconds": round(seconds),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "survivors": survivors,
    }


def _mutant_order(name: str) -> tuple[str, int]:
    base, _, n = name.rpartition("__mutmut_")
    return base, int(n) if n.isdigit() else 0


def load_results() -> dict[str, dict]:
    """module -> its last run, from one file per module."""
    found = sorted(RESULTS.glob("*.json")) if RESULTS.is_dir() else []
    return {r["module"]: r for r in (json.loads(p.read_text()) for p in found)}


def save_result(module: str, r: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{slug(module)}.json").write_text(
        json.dumps({"module": module} | r, indent=1, ensure_ascii=False) + "\n"
    )


def load_reasons() -> list[dict]:
    files = [f for path in REASONS for f in ([path] if path.is_file() else sorted(path.glob("*.toml")))]
    return [entry for f in files for entry in tomllib.loads(f.read_text()).get("survivor", [])]


def reason_for(module: str, s: dict, reasons: list[dict]) -> str:
    """The recorded reason for a survivor: an entry naming its file, function and
    mutation, or else a rule (`file = "*"` or the module, and a regex `match` on the
    original and mutated text joined by " => ") for a whole class of mutants."""
    for r in reasons:
        if "match" in r:
            if r.get("function", s["function"]) != s["function"]:
                continue
            if r["file"] in ("*", module) and re.search(r["match"], f"{s['original']} => {s['mutated']}"):
                return r["reason"]
            continue
        if r["file"] != module or r["function"] != s["function"]:
            continue
        if r.get("mutated", s["mutated"]) == s["mutated"] and r.get("original", s["original"]) == s["original"]:
            return r["reason"]
    return "**unexplained**"


def _cell(text: str) -> str:
    text = text.replace("|", "\\|")
    return f"`{text}`" if text else "(removed)"


def in_scope() -> list[str]:
    """Every module the table is to cover (SCOPE), empty package markers left out."""
    found = (p for package in SCOPE for p in sorted((ROOT / package).rglob("*.py")))
    rel = (str(p.relative_to(ROOT)) for p in found if p.stat().st_size > 0 or p.name != "__init__.py")
    return [m for m in rel if m not in OUT_OF_SCOPE and "/__pycache__/" not in m]


def render(results: dict) -> str:
    reasons = load_reasons()
    out = [
        "# Mutation report",
        "",
        "Written by `make mutation` (scripts/mutation.py; how and why: [README.md](README.md)).",
        "Each module is mutated by mutmut and judged by the tests listed for it only.",
        f"Goal: at least {GOAL:.0%} of each module's mutants killed; every survivor has a reason.",
        "",
        "| module | killed / total | score | of them timed out | survived | no tests | not run | run (s) | date |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ran = [m for m in MODULES if m in results]
    met = [m for m in ran if results[m]["score"] >= GOAL]
    old = [m for m in ran if stale(ROOT, m, results[m], RESULTS / f"{slug(m)}.json")]
    unexplained = [s for m in ran for s in results[m]["survivors"] if reason_for(m, s, reasons) == "**unexplained**"]
    summary = (
        f"Modules run: {len(ran)} of {len(MODULES)}; at or above the goal: {len(met)}; "
        f"stale (code changed since the run): {len(old)}; survivors without a recorded reason: {len(unexplained)}."
    )
    out[5:5] = ["", summary]
    for module in ran + sorted(set(results) - set(MODULES)):
        r = results[module]
        c = r["counts"]
        flag = ("" if r["score"] >= GOAL else " (below goal)") + (" (stale)" if module in old else "")
        out.append(
            f"| {module} | {c['killed']} / {r['total']} | {r['score']:.1%}{flag} | {r.get('timed_out', '-')} | "
            f"{c['survived']} | "
            f"{c['no_tests']} | {c['not_run']} | {r['seconds']} | {r['date']} |"
        )
    if old:
        out += [
            "",
            "Stale: the code of these modules (docstrings aside) changed after their run, so their score is about "
            "older code; run them again: " + ", ".join(f"`{m}`" for m in old) + ".",
        ]
    not_run = [m for m in MODULES if m not in results]
    if not_run:
        out += ["", "In the table, not run yet: " + ", ".join(f"`{m}`" for m in not_run) + "."]
    unlisted = [m for m in in_scope() if m not in MODULES]
    if unlisted:
        out += [
            "",
            f"Unmeasured: {len(unlisted)} modules of {', '.join(f'{p}/' for p in SCOPE)} have no test list in "
            "scripts/mutation_table.py yet: " + ", ".join(f"`{m}`" for m in unlisted) + ".",
        ]
    for module in [m for m in MODULES if m in results]:
        r = results[module]
        out += ["", f"## {module}", "", "Tests: " + ", ".join(f"`{t}`" for t in r["tests"]) + "."]
        if module in NOTES:
            out += ["", NOTES[module]]
        if not r["survivors"]:
            out += ["", "No survivors."]
            continue
        out += ["", "| line | function | original | mutated | status | reason |", "|---|---|---|---|---|---|"]
        for s in r["survivors"]:
            out.append(
                f"| {module}:{s['line']} | `{s['function']}` | {_cell(s['original'])} | {_cell(s['mutated'])} "
                f"| {s['status']} | {reason_for(module, s, reasons)} |"
            )
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="*", help="modules to run (default: all in MODULES)")
    ap.add_argument("--report", action="store_true", help="only re-render report.md from the results")
    ap.add_argument("--max-children", type=int, default=1, help="mutants run in parallel (default 1)")
    ap.add_argument("--budget", type=float, default=1800, help="seconds allowed per module (default 1800)")
    ap.add_argument("--collect", action="store_true", help="score the modules' finished copies again, without a run")
    args = ap.parse_args()
    DOCS.mkdir(parents=True, exist_ok=True)
    results = load_results()
    if not args.report:
        unknown = [m for m in args.modules if m not in MODULES]
        if unknown:
            ap.error(f"not in MODULES: {unknown}")
        if args.collect and not args.modules:
            ap.error("--collect scores the modules named (each one's copy from its last run)")
        modules = args.modules or list(MODULES)
        if len(modules) > 1 and not args.collect:
            # one process per module, so that the table and the tests are read afresh
            # for each (a long run picks up a test added meanwhile)
            for module in modules:
                options = ["--max-children", str(args.max_children), "--budget", str(args.budget)]
                subprocess.run([sys.executable, __file__, module, *options], check=False)
            return 0
        for module in modules:
            if args.collect:
                r = recollect(module)
            else:
                print(f"mutating {module} against {' '.join(MODULES[module])}", flush=True)
                r = run_module(module, args.max_children, args.budget)
            save_result(module, r)
            print(f"  {r['counts']['killed']}/{r['total']} killed ({r['score']:.1%}) in {r['seconds']} s", flush=True)
            # read again: a run of another module, side by side, may have written meanwhile
            results = load_results()
            REPORT.write_text(render(results))
    REPORT.write_text(render(results))
    unexplained = sum(
        reason_for(m, s, load_reasons()) == "**unexplained**" for m, r in results.items() for s in r["survivors"]
    )
    print(f"report: {REPORT.relative_to(ROOT)} ({unexplained} survivors unexplained)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
