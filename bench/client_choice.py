"""`python -m bench.client_choice`: which HTTP client for the gateway's upstream
calls, aiohttp, httpx or the gateway's own (adapters/http_client.py), measured
side by side. Timing the gateway's own client means importing it, so the
benchmark is `bench.internal.client_choice` (the one part of bench/ allowed to
import gateway/ and adapters/); this entry point runs it as a child process.
"""

from __future__ import annotations

import subprocess
import sys

from bench.procs import ROOT, python_module


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return subprocess.run(python_module("bench.internal.client_choice", *args), cwd=ROOT).returncode


if __name__ == "__main__":
    raise SystemExit(main())
