"""Drive a server with `wrk` (C, one thread) when it is installed: at 1,500+
requests/s a Python client on a 2-core machine would take the CPU the server
needs, and measure itself. wrk reads chunked (streamed) answers to their end."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}


@dataclass(frozen=True, slots=True)
class WrkResult:
    requests: int
    duration_s: float
    requests_per_s: float
    latency_ms: dict[str, float]  # p50, p90, p99
    errors: int  # socket errors + non-2xx answers

    def as_dict(self) -> dict:
        return {**asdict(self), "client": "wrk"}


def available() -> bool:
    return shutil.which("wrk") is not None


def lua_post(body: bytes) -> str:
    # A Lua long string holds the JSON as is; the level is chosen so the body cannot close it.
    level = 1
    while b"]" + b"=" * level + b"]" in body:
        level += 1
    eq = "=" * level
    return (
        f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = [{eq}[{body.decode()}]{eq}]\n"
    )


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse(output: str) -> WrkResult:
    lat = {f"p{p}": _ms(v) for p, v in re.findall(r"^\s+(50|90|99)(?:\.000)?%\s+(\S+)", output, re.M)}
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", output)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if not m or not rps:
        raise ValueError(f"could not read wrk's output:\n{output}")
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", output))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return WrkResult(
        requests=int(m.group(1)),
        duration_s=_ms(m.group(2) + m.group(3)) / 1000.0,
        requests_per_s=float(rps.group(1)),
        latency_ms=lat,
        errors=errors + (int(non2xx.group(1)) if non2xx else 0),
    )


def run(url: str, body: bytes, connections: int, duration_s: float, threads: int = 1) -> WrkResult:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(lua_post(body))
        script = Path(f.name)
    try:
        out = subprocess.run(
            [
                "wrk",
                f"-t{threads}",
                f"-c{connections}",
                f"-d{duration_s:g}s",
                "--latency",
                # wrk's own 2 s default would count a slow server's answers as errors.
                "--timeout",
                "30s",
                "-s",
                str(script),
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=duration_s + 60,
        )
    finally:
        script.unlink(missing_ok=True)
    return parse(out.stdout)
