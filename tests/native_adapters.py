"""The native engine's adapter for module fixtures: started on a model directory,
handed to the tests, then closed."""

from __future__ import annotations

import asyncio
import json
import shutil
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


def with_bos(model_dir: Path, out: Path) -> Path:
    """A copy of `model_dir` whose tokenizer adds a BOS token (<|endoftext|>, id 0) to every
    encode that asks for special tokens, as Llama's do: the tiny model's adds none, so
    there whether special tokens were asked for cannot be seen."""
    shutil.copytree(model_dir, out, dirs_exist_ok=True)
    spec = json.loads((out / "tokenizer.json").read_text())
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}},
    }
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return out
