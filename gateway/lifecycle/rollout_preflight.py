"""A rollout's pre-flight (`rollout.preflight: true`): the conformance suite (`core`)
against the candidate backends alone, served as the model by a throwaway gateway
process on loopback, both in child processes; a MUST failure, or a suite that could
not run, refuses the rollout (docs/rollouts.md, "The state machine").
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gateway.config.schema import GatewayConfig
from processes import Child, ChildFailed, free_port, http_probe

log = logging.getLogger("switchyard.rollout")
SWITCHYARD = [sys.executable, "-m", "gateway.cli"]
PROFILE = "core"


class ConformancePreflight:
    """`await preflight(model)` -> the MUST checks that failed (empty: passed)."""

    def __init__(self, config: Any, timeout_s: float = 600.0) -> None:
        """`config`: a callable giving the config in force."""
        self.config = config
        self.timeout_s = timeout_s

    async def __call__(self, model: str) -> tuple[str, ...]:
        return await asyncio.to_thread(self.run, model)

    def run(self, model: str) -> tuple[str, ...]:
        config: GatewayConfig = self.config()
        with tempfile.TemporaryDirectory(prefix="switchyard-preflight-") as tmp:
            return self._run(config, model, Path(tmp))

    def _run(self, config: GatewayConfig, model: str, tmp: Path) -> tuple[str, ...]:
        model_cfg = config.models.get(model)
        if model_cfg is None:
            return (f"preflight: model {model} is no longer configured",)
        candidates = [
            b.model_dump(mode="json", exclude_none=True) for b in model_cfg.backends if b.track == "candidate"
        ]
        for backend in candidates:
            backend.pop("track", None)
        port = free_port()
        alone = {
            "listen": {"host": "127.0.0.1", "port": port},
            "access_log": False,
            "models": {model: {"backends": candidates}},
        }
        config_path = tmp / "candidate.yaml"
        config_path.write_text(yaml.safe_dump(alone))
        config_path.chmod(0o600)
        url = f"http://127.0.0.1:{port}"
        with Child(
            [*SWITCHYARD, "serve", "--config", str(config_path)], tmp / "gateway.log", name="preflight-gateway"
        ) as gw:
            try:
                gw.wait_ready(http_probe(url + "/healthz"), timeout_s=60)
            except ChildFailed as exc:  # not ready in time, or exited first
                return (f"preflight: the candidate's gateway did not start: {str(exc)[:300]}",)
            report_dir = tmp / "report"
            argv = [
                *SWITCHYARD, "conformance", "run", "--base-url", url, "--model", model,
                "--profile", PROFILE, "--report", str(report_dir), "--quiet", "--allow-incomplete",
            ]  # fmt: skip
            with Child(argv, tmp / "conformance.log", name="preflight-conformance") as suite:
                deadline = time.monotonic() + self.timeout_s
                while suite.poll() is None:
                    if time.monotonic() > deadline:
                        return (f"preflight: the conformance suite ran past {self.timeout_s:g} s",)
                    time.sleep(0.2)
                ran = suite.log_tail(600)
        return must_failures(report_dir / "report.json", ran)


def must_failures(report: Path, log_tail: str = "") -> tuple[str, ...]:
    """The MUST checks a conformance report says failed or erred, by id; a report that is
    not there says the suite did not run (its log's tail, for the reason)."""
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return (f"preflight: the conformance suite did not run: {log_tail.strip()[-300:]}",)
    return tuple(
        r["id"] for r in data.get("results", []) if r.get("level") == "MUST" and r.get("status") in ("fail", "error")
    )
