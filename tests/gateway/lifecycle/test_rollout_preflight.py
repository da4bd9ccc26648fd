"""A rollout's pre-flight run (gateway/lifecycle/rollout_preflight.py) in process, against a
stand-in for `python -m gateway.cli`: a small script that serves /healthz on the port its
config names (or not), and a conformance run that writes the report it is told to. What the
pre-flight writes for the candidate's gateway, the suite's command line, the MUST checks it
reads back, and each way it refuses: a model gone, a gateway that never answers, a suite past
its time or one that wrote no report."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from gateway.config.schema import parse_config
from gateway.lifecycle import rollout_preflight
from gateway.lifecycle.rollout_preflight import ConformancePreflight, must_failures
from processes import Child

# The stand-in: `serve --config PATH` records its argv and config, then answers 200 on /healthz
# only (503 elsewhere, so a probe of another path never sees it ready); `conformance run ...`
# records its argv and writes $FAKE_REPORT as report.json, sleeps, or prints and writes nothing.
FAKE = r"""
import json, os, sys, time, http.server, yaml
out = os.environ["FAKE_DIR"]
mode = os.environ.get("FAKE_MODE", "report")
args = sys.argv[1:]
if args[0] == "serve":
    path = args[args.index("--config") + 1]
    config = yaml.safe_load(open(path))
    json.dump({"argv": args, "config": config, "mode": os.stat(path).st_mode}, open(out + "/serve.json", "w"))
    if mode == "gateway-down":
        print("still loading " * 100, flush=True)
        time.sleep(60)
    if mode == "gateway-exits":
        print("config refused: port in use", flush=True)
        sys.exit(2)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/healthz" else 503)
            self.send_header("content-length", "0")
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer((config["listen"]["host"], config["listen"]["port"]), H).serve_forever()
else:
    json.dump(args, open(out + "/conformance.json", "w"))
    if mode == "hang":
        time.sleep(60)
    elif mode == "blank-tail":
        print("BA" + " " * 598)  # 601 characters with the newline: the last 600 hold only the A
        sys.exit(2)
    elif mode == "no-report":
        print("x" * 700 + " the suite could not start: no module named openai   ")
        sys.exit(2)
    else:
        report = args[args.index("--report") + 1]
        os.makedirs(report, exist_ok=True)
        open(report + "/report.json", "w").write(os.environ["FAKE_REPORT"])
"""

REPORT = {
    "results": [
        {"id": "streaming.done_marker", "level": "MUST", "status": "fail"},
        {"id": "chat.basic", "level": "MUST", "status": "pass"},
        {"id": "usage.present", "level": "SHOULD", "status": "fail"},
        {"id": "errors.shape", "level": "MUST", "status": "error"},
        {"id": "tools.skipped", "level": "MUST", "status": "skip"},
    ]
}
VLLM = {"adapter": "vllm", "url": "http://127.0.0.1:8000"}


def config_of():
    backends = [
        {"name": "old", **VLLM},
        {"name": "new", **VLLM, "track": "candidate"},
        {"name": "new2", "adapter": "openai", "url": "http://127.0.0.1:8001/v1", "track": "candidate"},
    ]
    return parse_config({"models": {"m": {"backends": backends, "rollout": {}}}})


class ShortWait(Child):
    """A Child whose readiness wait records the limit it was given and waits `cap` s at most."""

    limits: list[float] = []
    cap = 15.0

    def wait_ready(self, probe, timeout_s=60.0, interval_s=0.05):
        ShortWait.limits.append(timeout_s)
        if ShortWait.cap < 1:  # a short wait: only once the child has written its log (a slow start-up)
            for _ in range(300):
                if self.log() or self.poll() is not None:
                    break
                time.sleep(0.05)
        return super().wait_ready(probe, timeout_s=min(timeout_s, ShortWait.cap), interval_s=interval_s)


@pytest.fixture()
def fake(tmp_path, monkeypatch):
    script = tmp_path / "fake_switchyard.py"
    script.write_text(FAKE)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(rollout_preflight, "SWITCHYARD", [sys.executable, str(script)])
    monkeypatch.setattr(rollout_preflight, "Child", ShortWait)
    monkeypatch.setenv("FAKE_DIR", str(out))
    monkeypatch.setenv("FAKE_REPORT", json.dumps(REPORT))
    ShortWait.limits, ShortWait.cap = [], 15.0
    return out


def test_the_candidates_alone_are_served_and_the_must_failures_come_back(fake):
    config = config_of()
    preflight = ConformancePreflight(lambda: config)
    assert preflight.timeout_s == 600.0
    assert preflight.run("m") == ("streaming.done_marker", "errors.shape")
    served = json.loads((fake / "serve.json").read_text())
    argv, written = served["argv"], served["config"]
    assert argv[:2] == ["serve", "--config"] and len(argv) == 3
    config_path = Path(argv[2])
    assert config_path.name == "candidate.yaml" and config_path.parent.name.startswith("switchyard-preflight-")
    assert not config_path.parent.exists()  # the throwaway directory is gone afterwards
    assert stat.S_IMODE(served["mode"]) == 0o600
    port = written["listen"]["port"]
    assert written == {
        "listen": {"host": "127.0.0.1", "port": port},
        "access_log": False,
        "models": {"m": {"backends": written["models"]["m"]["backends"]}},
    }
    backends = written["models"]["m"]["backends"]
    assert [b["name"] for b in backends] == ["new", "new2"]
    assert [(b["adapter"], b["url"]) for b in backends] == [
        ("vllm", "http://127.0.0.1:8000"),
        ("openai", "http://127.0.0.1:8001/v1"),
    ]
    # no track (the candidates are this gateway's only backends) and no unset field
    assert all("track" not in b and None not in b.values() for b in backends)
    assert ShortWait.limits == [60]
    suite = json.loads((fake / "conformance.json").read_text())
    report_dir = suite[suite.index("--report") + 1]
    assert suite == [
        "conformance", "run", "--base-url", f"http://127.0.0.1:{port}", "--model", "m",
        "--profile", "core", "--report", report_dir, "--quiet", "--allow-incomplete",
    ]  # fmt: skip
    assert Path(report_dir).name == "report" and Path(report_dir).parent == config_path.parent


async def test_the_awaited_preflight_runs_the_config_in_force_at_the_time(fake):
    holder = {"config": parse_config({"models": {"other": {"backends": [{"name": "x", **VLLM}]}}})}
    preflight = ConformancePreflight(lambda: holder["config"], timeout_s=30)
    assert await preflight("m") == ("preflight: model m is no longer configured",)
    assert not (fake / "serve.json").exists()
    holder["config"] = config_of()
    assert await preflight("m") == ("streaming.done_marker", "errors.shape")


def test_a_clean_report_passes(fake, monkeypatch):
    monkeypatch.setenv("FAKE_REPORT", json.dumps({"results": [{"id": "a", "level": "MUST", "status": "pass"}]}))
    assert ConformancePreflight(config_of).run("m") == ()


def test_a_gateway_that_never_answers_refuses_the_rollout(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "gateway-down")
    ShortWait.cap = 0.5
    (failed,) = ConformancePreflight(config_of).run("m")
    assert failed.startswith("preflight: the candidate's gateway did not start: preflight-gateway not ready after")
    assert len(failed) == len("preflight: the candidate's gateway did not start: ") + 300  # the reason cut at 300
    assert not (fake / "conformance.json").exists()


def test_a_gateway_that_exits_before_it_is_ready_refuses_the_rollout_saying_so(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "gateway-exits")
    (failed,) = ConformancePreflight(config_of).run("m")
    assert failed.startswith("preflight: the candidate's gateway did not start: "), failed
    assert "config refused: port in use" in failed  # its log's tail, for the reason
    assert not (fake / "conformance.json").exists()


def test_a_suite_past_its_time_refuses_the_rollout(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "hang")
    assert ConformancePreflight(config_of, timeout_s=0.5).run("m") == (
        "preflight: the conformance suite ran past 0.5 s",
    )
    assert ConformancePreflight(config_of, timeout_s=1.0).run("m") == ("preflight: the conformance suite ran past 1 s",)


def test_a_suite_that_wrote_no_report_refuses_with_the_end_of_its_log(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "no-report")
    (failed,) = ConformancePreflight(config_of).run("m")
    head = "preflight: the conformance suite did not run: "
    assert failed.startswith(head) and failed.endswith("the suite could not start: no module named openai")
    assert failed == head + ("x" * 700 + " the suite could not start: no module named openai")[-300:]


def test_the_reason_is_read_from_the_last_600_characters_of_the_suites_log(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "blank-tail")
    assert ConformancePreflight(config_of).run("m") == ("preflight: the conformance suite did not run: A",)


def test_a_report_without_results_has_no_failures_and_a_missing_one_no_tail_by_default(tmp_path):
    (tmp_path / "report.json").write_text("{}")
    assert must_failures(tmp_path / "report.json") == ()
    assert must_failures(tmp_path / "absent.json") == ("preflight: the conformance suite did not run: ",)
    (tmp_path / "broken.json").write_text("{not json")
    assert must_failures(tmp_path / "broken.json", " cut short\n") == (
        "preflight: the conformance suite did not run: cut short",
    )
