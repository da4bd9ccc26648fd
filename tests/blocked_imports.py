"""The `switchyard` command run as if some packages were not installed: an import
hook in the child refuses them, as a smaller install (a base `pip install .`, the
gateway image) would."""

from __future__ import annotations

import sys
from collections.abc import Iterable

# argv[1]: the refused top-level packages; argv[2]: further packages to report on;
# the rest: the command's own arguments. When the command returns, the line
# `IMPORTED [...]` names the refused or reported packages that got imported anyway.
_CLI_WITHOUT = """
import json, sys
blocked = set(filter(None, sys.argv[1].split(",")))
watched = blocked | set(filter(None, sys.argv[2].split(",")))
class RefuseMissing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not installed here)", name=name)
        return None
sys.meta_path.insert(0, RefuseMissing())
from gateway.cli.main import main
try:
    status = main(sys.argv[3:])
except SystemExit as exc:
    status = exc.code
print("IMPORTED " + json.dumps(sorted({m.partition(".")[0] for m in sys.modules} & watched)), flush=True)
sys.exit(status)
"""


def cli_without(blocked: Iterable[str], *argv: str, watched: Iterable[str] = ()) -> list[str]:
    """The command line of `switchyard <argv>` with the `blocked` packages refused on
    import (and `watched` ones reported as well)."""
    return [sys.executable, "-c", _CLI_WITHOUT, ",".join(sorted(blocked)), ",".join(sorted(watched)), *argv]
