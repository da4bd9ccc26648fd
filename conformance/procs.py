"""Start and stop the servers a matrix run needs (gateway, simulators) as
real child processes on loopback, built on `processes`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from processes import Child, ChildFailed, free_port, http_probe

SWITCHYARD = [sys.executable, "-m", "gateway.cli"]
ROOT = Path(__file__).resolve().parent.parent

__all__ = ["ROOT", "SWITCHYARD", "ChildFailed", "ManagedProcess", "free_port", "start_gateway"]


class ManagedProcess:
    """A named child process (run from the repository root) serving at `url`;
    its own session, so `stop()` also ends whatever it spawned."""

    def __init__(self, name: str, args: list[str], url: str, log_path: Path, cwd: Path = ROOT) -> None:
        self.name = name
        self.url = url
        # Our packages stay importable whatever the working directory.
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.child = Child(args, log_path, name=name, cwd=cwd, env={"PYTHONPATH": path}, stop_timeout_s=15)

    def wait_ready(self, path: str, timeout_s: float = 120.0) -> ManagedProcess:
        """Poll `url + path` until it answers below 500. On failure the process is
        stopped before the error (with its log tail) is raised."""
        self.child.wait_ready(http_probe(self.url + path, timeout_s=2.0), timeout_s=timeout_s, interval_s=0.2)
        return self

    def log_tail(self, chars: int = 3000) -> str:
        return self.child.log_tail(chars)

    def stop(self) -> None:
        self.child.stop()


def start_gateway(config_path: Path, port: int, log_dir: Path, cwd: Path = ROOT) -> ManagedProcess:
    """`switchyard serve --config` in `cwd` (where relative paths inside the config
    resolve, as they would for `switchyard serve` run there). Raises
    `processes.ChildFailed`, the gateway stopped, when it does not become ready."""
    p = ManagedProcess(
        "gateway",
        [*SWITCHYARD, "serve", "--config", str(config_path.resolve()), "--port", str(port)],
        f"http://127.0.0.1:{port}",
        log_dir / "gateway.log",
        cwd=cwd,
    )
    return p.wait_ready("/healthz")
