"""Check bodies with a known outcome, for the runner, report and verdict tests."""

from __future__ import annotations

from conformance.context import Context
from conformance.result import CheckFailed, Evidence


async def passes(ctx: Context) -> None:
    return None


async def fails(ctx: Context) -> None:
    """A MUST-style failure with one piece of evidence (its message has markup to escape)."""
    raise CheckFailed(
        "bad <chunk>: role twice",
        [
            Evidence(
                expected="role once",
                seen="role in chunk 3",
                where="chunk 3 choices[0].delta.role",
                offending={"delta": {"role": "assistant"}},
                request={"method": "POST", "path": "/chat/completions", "body": {"stream": True}},
            )
        ],
    )
