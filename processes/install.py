"""The distribution's name and the one way to say how to install an extra.

PyPI's `switchyard` is an unrelated package, so this project's distribution is
`switchyard-gateway` (pyproject.toml), installed from a source checkout: every
hint says `pip install '.[extra]'`, never a name pip would fetch from PyPI.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "switchyard-gateway"


def install_hint(extra: str) -> str:
    """`pip install '.[extra]'`, for a source checkout of this project."""
    return f"pip install '.[{extra}]' in the Switchyard source checkout"


def installed_version() -> str:
    """The installed distribution's version ("unknown" when run from an uninstalled tree)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"
