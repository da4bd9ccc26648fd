"""Starting the servers a benchmark measures: real processes on free loopback
ports, built on `processes`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from processes import Child, http_probe

ROOT = Path(__file__).resolve().parents[1]


class Server:
    """A server to start: the child starts when the `with` block is entered (and
    is ready when it begins) and is stopped when the block ends. Its log is
    `log_dir/<name>.log`; it runs in `cwd` (another checkout's root runs that
    checkout's code with `python -m`)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        ready_url: str,
        log_dir: Path,
        env: dict[str, str] | None = None,
        ready_timeout_s: float = 60.0,
        cwd: Path = ROOT,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.ready_url = ready_url
        self.log_path = log_dir / f"{name}.log"
        self.env = env
        self.ready_timeout_s = ready_timeout_s
        self.cwd = cwd
        self.child: Child | None = None

    @property
    def base_url(self) -> str:
        """scheme://host:port of `ready_url`."""
        scheme, _, rest = self.ready_url.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}"

    def __enter__(self) -> Server:
        """Raises `processes.ChildFailed` (with the log's tail) if the server exits
        or does not answer `ready_url` below 500 in time."""
        self.child = Child(self.argv, self.log_path, name=self.name, cwd=self.cwd, env=self.env)
        self.child.wait_ready(http_probe(self.ready_url), timeout_s=self.ready_timeout_s, interval_s=0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.child is not None:
            self.child.stop()


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
