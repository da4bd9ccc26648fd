"""Trace files people publish, read into one shape: `TraceRow` (arrival time in seconds,
input and output lengths in tokens, and the text or prefix blocks when the format has them).

| format | file | fields read |
|---|---|---|
| `azure` | Azure LLM inference CSV | `TIMESTAMP` (wall clock), `ContextTokens`, `GeneratedTokens` |
| `mooncake` | Mooncake / Kimi JSONL | `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (512-token blocks) |
| `sharegpt` | ShareGPT JSON | `conversations`: the first human turn is the prompt, the next gpt turn's length the output |
| `jsonl` | the bench harness's own JSONL | `timestamp` (s) or `timestamp_ms`; `prompt`/`messages` or `input_tokens`, `output_tokens`; `tenant` |

A malformed row is refused with the file and row named (line number, or index in a JSON
list). Files are read row by row and at most `limit` rows are kept; a ShareGPT file is one
JSON document, so it is refused above `MAX_JSON_BYTES` rather than loaded whole.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

TraceFormat = Literal["azure", "mooncake", "sharegpt", "jsonl"]
MOONCAKE_BLOCK_TOKENS = 512
MAX_JSON_BYTES = 256 * 1024 * 1024
# ShareGPT has no output length field: 4 characters a token is the usual estimate (stated in reports).
CHARS_PER_TOKEN = 4


class TraceError(ValueError):
    """A trace row or file the reader cannot use; the message names the file and row."""


@dataclass(frozen=True)
class TraceRow:
    timestamp_s: float | None  # None: the format has no arrival times (ShareGPT)
    input_tokens: int
    output_tokens: int
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    hash_ids: tuple[int, ...] = ()
    tenant: str = "default"
    extra: dict[str, Any] = field(default_factory=dict)


def read_trace(path: Path, fmt: TraceFormat, limit: int) -> list[TraceRow]:
    """At most `limit` rows of `path` in `fmt`."""
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    rows: list[TraceRow] = []
    for row in READERS[fmt](path):
        rows.append(row)
        if len(rows) >= limit:
            break
    if not rows:
        raise TraceError(f"{path}: no rows")
    return rows


def _int(value: Any, name: str, where: str, minimum: int = 0) -> int:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name} {value!r} is not an integer") from None
    if n < minimum:
        raise TraceError(f"{where}: {name} {n} is below {minimum}")
    return n


def _azure(path: Path) -> Iterator[TraceRow]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        need = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
        if reader.fieldnames is None or not need <= {h.strip() for h in reader.fieldnames}:
            raise TraceError(f"{path}: an Azure trace's header is TIMESTAMP,ContextTokens,GeneratedTokens")
        for lineno, raw in enumerate(reader, 2):
            where = f"{path}:{lineno}"
            row = {(k or "").strip(): v for k, v in raw.items()}
            stamp = (row.get("TIMESTAMP") or "").strip()
            try:
                # Seven fractional digits in the published files; Python reads six.
                head, _, frac = stamp.partition(".")
                when = datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}" if frac else head)
            except ValueError:
                raise TraceError(f"{where}: TIMESTAMP {stamp!r} is not a date and time") from None
            yield TraceRow(
                when.timestamp(),
                _int(row.get("ContextTokens"), "ContextTokens", where, 1),
                _int(row.get("GeneratedTokens"), "GeneratedTokens", where, 0),
            )


def _json_lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{where}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: each line must be a JSON object")
            yield where, obj


def _mooncake(path: Path) -> Iterator[TraceRow]:
    for where, obj in _json_lines(path):
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise TraceError(f"{where}: a Mooncake row needs {key!r}")
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise TraceError(f"{where}: hash_ids must be a list of integers")
        yield TraceRow(
            _int(obj["timestamp"], "timestamp", where) / 1000.0,
            _int(obj["input_length"], "input_length", where, 1),
            _int(obj["output_length"], "output_length", where, 0),
            hash_ids=tuple(ids),
        )


def _sharegpt(path: Path) -> Iterator[TraceRow]:
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise TraceError(f"{path}: {size} bytes; a ShareGPT file over {MAX_JSON_BYTES} bytes is refused (cut it first)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list):
        raise TraceError(f"{path}: a ShareGPT file is a JSON list of conversations")
    for i, conv in enumerate(data):
        where = f"{path}[{i}]"
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            raise TraceError(f"{where}: needs 'conversations', a list of {{from, value}}")
        pair = _first_exchange(turns, where)
        if pair is None:
            continue  # no human turn answered by gpt: nothing to replay (vLLM's sharegpt skips these too)
        prompt, answer = pair
        yield TraceRow(
            None,
            max(1, len(prompt) // CHARS_PER_TOKEN),
            max(1, len(answer) // CHARS_PER_TOKEN),
            prompt=prompt,
            extra={"id": conv.get("id")},
        )


def _first_exchange(turns: list[Any], where: str) -> tuple[str, str] | None:
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str) or "from" not in turn:
            raise TraceError(f"{where}.conversations[{k}]: each turn is {{from, value}} with a string value")
    for k in range(len(turns) - 1):
        if turns[k]["from"] == "human" and turns[k + 1]["from"] == "gpt" and turns[k]["value"].strip():
            return turns[k]["value"], turns[k + 1]["value"]
    return None


def _bench_jsonl(path: Path) -> Iterator[TraceRow]:
    for where, obj in _json_lines(path):
        if "timestamp" in obj:
            try:
                stamp = float(obj["timestamp"])
            except (TypeError, ValueError):
                raise TraceError(f"{where}: timestamp {obj['timestamp']!r} is not a number") from None
        elif "timestamp_ms" in obj:
            stamp = _int(obj["timestamp_ms"], "timestamp_ms", where) / 1000.0
        else:
            raise TraceError(f"{where}: needs 'timestamp' (s) or 'timestamp_ms'")
        messages = obj.get("messages")
        if messages is not None and (not isinstance(messages, list) or not messages):
            raise TraceError(f"{where}: 'messages' must be a non-empty list")
        prompt = obj.get("prompt")
        if prompt is None and messages is None and "input_tokens" not in obj:
            raise TraceError(f"{where}: needs 'prompt', 'messages' or 'input_tokens'")
        yield TraceRow(
            stamp,
            _int(obj.get("input_tokens", 1), "input_tokens", where, 1),
            _int(obj.get("output_tokens", obj.get("max_tokens", 64)), "output_tokens", where, 0),
            prompt=str(prompt) if prompt is not None else None,
            messages=messages,
            tenant=str(obj.get("tenant", "default")),
        )


READERS = {"azure": _azure, "mooncake": _mooncake, "sharegpt": _sharegpt, "jsonl": _bench_jsonl}
