"""Choosing the token source from the CLI options."""

from __future__ import annotations

from typing import Any

from simulators.options import SimOptions
from simulators.tokens import SyntheticSource


class SourceUnavailable(RuntimeError):
    pass


def make_source(opts: SimOptions) -> Any:
    if opts.source == "engine":
        try:
            from simulators.engine_source import EngineSource
        except ImportError as exc:
            raise SourceUnavailable(f"--source engine is unavailable: {exc}") from exc
        return EngineSource(opts)
    return synthetic_source(opts)


def synthetic_source(opts: SimOptions) -> SyntheticSource:
    return SyntheticSource(
        seed=opts.seed,
        output_tokens=opts.output_tokens,
        max_model_len=opts.max_model_len,
        ttft_ms=opts.ttft_ms,
        itl_ms=opts.itl_ms,
    )
