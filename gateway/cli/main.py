"""`switchyard` console script. Each area registers its own subcommands from its
package's `cli` module; this file only finds the one a command line needs.

Only the chosen command's modules are imported: a base install (`pip install .`,
the gateway pod) lacks the optional extras' packages (openai and httpx for
conformance, numpy and matplotlib for bench, torch for the engine), and `serve` or
`config check` must neither need them nor pay for importing them. A command whose
extra is missing says which one to install, in one line, and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass

from processes.install import install_hint

# The packages of this project: a missing module among them is a bug, not an extra.
OWN_PACKAGES = {
    "gateway",
    "adapters",
    "policies",
    "stores",
    "engine",
    "simulators",
    "conformance",
    "bench",
    "processes",
    "bakeoff",
}


@dataclass(frozen=True)
class CommandGroup:
    """A top-level command: the modules whose `register(subparsers)` add it (in that
    order), its help line, and the extra its dependencies come from (None: the base)."""

    modules: tuple[str, ...]
    help: str
    extra: str | None = None


# gateway.cli.commands adds `engine serve` to the engine's group, so engine.cli (argparse
# only) registers that group first, for this parser, wherever gateway.cli.commands runs.
GATEWAY = ("engine.cli", "gateway.cli.commands")
COMMANDS = {
    "serve": CommandGroup(GATEWAY, "run the gateway (no --config: the native engine, built-in model)"),
    "config": CommandGroup(GATEWAY, "config tools (config check FILE)"),
    "keys": CommandGroup(("policies.cli",), "manage API keys"),
    "rollout": CommandGroup(("gateway.cli.rollout",), "read and steer rollouts (rollout status [MODEL])"),
    "engine": CommandGroup(GATEWAY, "the native engine (make-tiny, serve)", "engine"),
    "simulate": CommandGroup(("simulators.cli",), "run a wire-faithful runtime simulator", "engine"),
    "conformance": CommandGroup(("conformance.cli",), "OpenAI-semantics conformance suite", "conformance"),
    "bench": CommandGroup(("bench.cli",), "load tests and benchmarks", "bench"),
    "bakeoff": CommandGroup(("bakeoff.cli",), "choose a runtime by measurement (run, compare)", "bakeoff"),
}


class MissingExtra(Exception):
    """A command's optional dependency is not installed."""

    def __init__(self, command: str, extra: str, module: str) -> None:
        super().__init__(
            f"switchyard {command} needs the `{extra}` extra, which is not installed (no module {module!r}): "
            f"{install_hint(extra)}"
        )


def _missing_extra(command: str, exc: ModuleNotFoundError) -> MissingExtra | None:
    """The extra to install when `exc` is a third-party module of `command`'s extra."""
    group = COMMANDS.get(command)
    name = (exc.name or "").split(".")[0]
    if group is None or group.extra is None or not name or name in OWN_PACKAGES:
        return None
    return MissingExtra(command, group.extra, name)


def _chosen(argv: list[str]) -> str | None:
    """The top-level command of a command line (the parser has no options before it)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: the chosen command's own parser, the others by name and
    help line only (enough for `--help` and for argparse's own errors)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="switchyard", description="An OpenAI-compatible LLM gateway.")
    sub = parser.add_subparsers(dest="command", required=True)
    command = _chosen(argv)
    group = COMMANDS.get(command) if command is not None else None
    if command is not None and group is not None:
        try:
            for module_name in group.modules:
                importlib.import_module(module_name).register(sub)
        except ModuleNotFoundError as exc:
            missing = _missing_extra(command, exc)
            if missing is None:
                raise
            _refusing(sub, command, group.help, missing)
    for name, other in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=other.help, add_help=False)
    return parser


def _refusing(sub: argparse._SubParsersAction, command: str, help_text: str, missing: MissingExtra) -> None:
    """`command` as a parser that takes anything and says what to install."""
    p = sub.add_parser(command, help=help_text, add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: _refuse(missing))


def _refuse(missing: MissingExtra) -> int:
    print(missing, file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        result = args.func(args)
    except ModuleNotFoundError as exc:
        # an extra's module imported only when the command runs (torch for make-tiny)
        missing = _missing_extra(args.command, exc)
        if missing is None:
            raise
        return _refuse(missing)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
