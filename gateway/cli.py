"""`switchyard` console script. Each area registers its own subcommands from its
package's `cli` module, so this file only dispatches."""

from __future__ import annotations

import argparse
import importlib
import sys

# (module, function) pairs; each `register(subparsers)` adds its subcommands and
# sets `func` on them. Imported lazily per module so that a missing optional
# extra (torch for the engine) only breaks the commands that need it.
SUBCOMMAND_MODULES = [
    "engine.cli",
    "simulators.cli",
    "conformance.cli",
    "bench.cli",
    "policies.cli",
    "gateway.commands",  # last: it adds to the engine's and simulators' groups
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description="An OpenAI-compatible LLM gateway.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # that area has no commands yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
