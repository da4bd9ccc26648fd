"""The native engine's adapter for module fixtures: started on a model directory,
handed to the tests, then closed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from adapters.native import NativeAdapter


def started_native(
    model_dir: Path | str, *, one_thread: bool = False, served_name: str | None = None, **engine_options: Any
) -> Iterator[NativeAdapter]:
    """`yield from` it in a fixture. `one_thread`: torch runs on one intra-op thread
    meanwhile (a tiny model on a shared 2-core machine runs several times faster so;
    the tests are about answers, not speed), the thread count restored after."""
    threads = torch.get_num_threads()
    if one_thread:
        torch.set_num_threads(1)
    adapter = NativeAdapter("local", str(model_dir), served_name=served_name, engine_options=engine_options)
    asyncio.run(adapter.start())
    try:
        yield adapter
    finally:
        asyncio.run(adapter.aclose())
        torch.set_num_threads(threads)
