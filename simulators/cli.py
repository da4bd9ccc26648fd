"""`switchyard simulate vllm|sglang|trtllm|tgi --port P ...`: run one runtime double.

`SIMULATE_SUBPARSERS` maps each `simulate` sub-command to the function that adds
it; other modules add entries (the lead's `openai` upstream) before `register`
runs, or the optional `simulators.openai_upstream.add_simulate_parser` hook is
picked up automatically.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

from simulators.options import KINDS, add_common_arguments, options_from_args

_HELP = {
    "vllm": "a vLLM 0.33 `vllm serve` double",
    "sglang": "an SGLang 0.5 `launch_server` double",
    "trtllm": "a TensorRT-LLM `trtllm-serve` double",
    "tgi": "a Hugging Face TGI 3.x double (--tgi-version 3.1 for the pre-3.2 shapes)",
}


def build_simulator(kind: str, opts: Any) -> Any:
    """The `Simulator` of one kind; imported lazily so each runtime loads only its module."""
    from simulators.sources import make_source

    module = importlib.import_module(f"simulators.{kind}")
    cls = {"vllm": "VllmSimulator", "sglang": "SglangSimulator", "trtllm": "TrtllmSimulator", "tgi": "TgiSimulator"}[
        kind
    ]
    return getattr(module, cls)(opts, source=make_source(opts))


def _run(args: argparse.Namespace) -> int:
    from simulators.server import run_forever

    opts = options_from_args(args.sim_kind, args)
    return run_forever(build_simulator(args.sim_kind, opts))


def _runtime_adder(kind: str) -> Callable[[Any], None]:
    def add(subparsers: Any) -> None:
        parser = subparsers.add_parser(kind, help=_HELP[kind], description=_HELP[kind])
        add_common_arguments(parser, kind)
        parser.set_defaults(func=_run, sim_kind=kind)

    return add


SIMULATE_SUBPARSERS: dict[str, Callable[[Any], None]] = {kind: _runtime_adder(kind) for kind in KINDS}


def _adders() -> dict[str, Callable[[Any], None]]:
    """`SIMULATE_SUBPARSERS`, plus the `openai` upstream's hook when that module has one."""
    try:
        upstream = importlib.import_module("simulators.openai_upstream")
    except ModuleNotFoundError:
        upstream = None
    hook = getattr(upstream, "add_simulate_parser", None)
    if hook is not None and "openai" not in SIMULATE_SUBPARSERS:
        SIMULATE_SUBPARSERS["openai"] = hook
    return SIMULATE_SUBPARSERS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run a wire-faithful runtime simulator",
        description="Run a wire-faithful runtime simulator (see simulators/README.md).",
    )
    runtime = parser.add_subparsers(dest="sim_kind", required=True)
    for add in _adders().values():
        add(runtime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulators")
    sub = parser.add_subparsers(dest="sim_kind", required=True)
    for add in _adders().values():
        add(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)
