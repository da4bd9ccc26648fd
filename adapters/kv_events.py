"""KV-cache events: what a runtime says about the prompt blocks it holds (`BlockStored`,
`BlockRemoved`, `AllBlocksCleared`, the same in every runtime that publishes them), the
payloads decoded here, and a request's blocks named with the runtime's own hashes.
policies/kv_index.py keeps one index per backend from them. Wire and hashes:
docs/runtimes.md §1.12 (vLLM) and §2.11 (SGLang); docs/architecture.md, "Routing".
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_MASK64 = (1 << 64) - 1
VLLM_DEFAULT_SEED = "vllm-none-hash"


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None = None
    block_size: int = 0
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[int, ...]
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class KVEventBatch:
    ts: float
    events: tuple[KVEvent, ...]
    data_parallel_rank: int | None = None


class KVEventDecodeError(ValueError):
    """A payload that is not a KV-event batch in any shape we know."""


def block_hash_int(value: int | bytes) -> int:
    """One representation for the wire's two: an int as is, a digest as its low 64 bits."""
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big") & _MASK64
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise KVEventDecodeError(f"a block hash must be an integer or bytes, not {type(value).__name__}")


def _hashes(values: Any) -> tuple[int, ...]:
    if not isinstance(values, list | tuple):
        raise KVEventDecodeError("block_hashes must be an array")
    return tuple(block_hash_int(v) for v in values)


def _event_from_map(raw: dict) -> KVEvent | None:
    kind = raw.get("type")
    if kind == "BlockStored":
        parent = raw.get("parent_block_hash")
        return BlockStored(
            _hashes(raw.get("block_hashes")),
            None if parent is None else block_hash_int(parent),
            int(raw.get("block_size") or 0),
            raw.get("medium"),
        )
    if kind == "BlockRemoved":
        return BlockRemoved(_hashes(raw.get("block_hashes")), raw.get("medium"))
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    if not isinstance(kind, str):
        raise KVEventDecodeError("an event map needs a string `type`")
    return None  # an event kind added after this reader: skipped, not fatal


def _event_from_array(raw: list) -> KVEvent | None:
    # The positional shape: [tag, block_hashes, parent, token_ids, block_size, lora_id, medium, ...]
    # for BlockStored, [tag, block_hashes, medium] for BlockRemoved.
    if not raw or not isinstance(raw[0], str):
        raise KVEventDecodeError("a positional event needs its tag first")
    fields = {"BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")}
    names = fields.get(raw[0], ("block_hashes", "medium"))
    return _event_from_map({"type": raw[0], **dict(zip(names, raw[1:]))})


def decode_batch(obj: Any) -> KVEventBatch:
    """A batch from its msgpack-decoded form: the positional `[ts, events, rank]`
    (or a map with those names), each event a tagged map or a positional array."""
    if isinstance(obj, dict):
        ts, raw_events = obj.get("ts"), obj.get("events")
        rank = obj.get("data_parallel_rank", obj.get("attn_dp_rank"))
    elif isinstance(obj, list | tuple) and len(obj) >= 2:
        ts, raw_events = obj[0], obj[1]
        rank = obj[2] if len(obj) > 2 else None
    else:
        raise KVEventDecodeError("a batch is [ts, events, rank]")
    if not isinstance(ts, int | float) or not isinstance(raw_events, list | tuple):
        raise KVEventDecodeError("a batch needs a numeric ts and an array of events")
    events = []
    for raw in raw_events:
        if isinstance(raw, dict):
            event = _event_from_map(raw)
        elif isinstance(raw, list | tuple):
            event = _event_from_array(list(raw))
        else:
            raise KVEventDecodeError(f"an event is a map or an array, not {type(raw).__name__}")
        if event is not None:
            events.append(event)
    return KVEventBatch(float(ts), tuple(events), rank if isinstance(rank, int) else None)


def decode_payload(payload: bytes) -> KVEventBatch:
    """A batch from the msgpack bytes of one published message (needs `msgpack`:
    the `kv-events` extra)."""
    import msgpack

    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise KVEventDecodeError(f"not msgpack: {exc}") from exc
    return decode_batch(obj)


# ---- the runtimes' block hashes --------------------------------------------------


def _sha256_pickle(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(obj: Any) -> bytes:
    import cbor2

    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


VLLM_HASH_FUNCTIONS: dict[str, Callable[[Any], bytes]] = {"sha256": _sha256_pickle, "sha256_cbor": _sha256_cbor}


def vllm_block_hashes(
    token_ids: Sequence[int], block_size: int, algorithm: str = "sha256", seed: str | None = None
) -> list[int]:
    """The event hashes vLLM gives the full blocks of `token_ids` (plain text: no
    LoRA, images or cache salt). `seed` is the runtime's PYTHONHASHSEED, if set."""
    hash_fn = VLLM_HASH_FUNCTIONS[algorithm]
    parent = hash_fn(VLLM_DEFAULT_SEED if seed is None else seed)
    hashes = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_fn((parent, tuple(token_ids[start : start + block_size]), None))
        hashes.append(int.from_bytes(parent, "big") & _MASK64)
    return hashes


def sglang_block_hashes(token_ids: Sequence[int], page_size: int) -> list[int]:
    """The event hashes SGLang gives the full pages of `token_ids` (no LoRA, no cache salt)."""
    digest = b""
    hashes = []
    for start in range(0, len(token_ids) - page_size + 1, page_size):
        page = b"".join(t.to_bytes(4, "little") for t in token_ids[start : start + page_size])
        digest = hashlib.sha256(digest + page).digest()
        hashes.append(int.from_bytes(digest[:8], "big", signed=True))
    return hashes
