"""vLLM's prefix-cache block hashes, restated from vLLM's source for the double.

`vllm/v1/core/kv_cache_utils.py` and `vllm/utils/hashing.py` (0.32/0.33 and main):

* a block is `block_size` prompt token ids; only full blocks are hashed;
* `hash_block_tokens(hash_fn, parent, ids, extra_keys)` is
  `hash_fn((parent, tuple(ids), extra_keys))`; `extra_keys` is None for a plain
  prompt (no LoRA, images, cache salt or prompt embeddings);
* the default `--prefix-caching-hash-algo` is `sha256`: SHA-256 of
  `pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)`, a 32-byte digest;
* the first block's parent is `NONE_HASH = hash_fn(seed)`, the seed being
  `PYTHONHASHSEED` when the process has it set, otherwise the fixed string
  "vllm-none-hash" for the SHA-256 algorithms (`resolve_none_hash_seed`);
* on the KV-event wire a hash is `maybe_convert_block_hash(digest)`: with
  `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` (default 1) the digest read as a
  big-endian integer, masked to its low 64 bits, i.e. its last 8 bytes.

Written here from that description, not shared with the gateway's reader
(adapters/kv_events.py): the tests check that the two agree.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Sequence
from typing import Any

BLOCK_SIZE = 16
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"


def sha256_pickle(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def none_hash(seed: str | None = None) -> bytes:
    """The first block's parent: the hash of PYTHONHASHSEED if set, else of vLLM's fixed seed."""
    if seed is None:
        seed = os.environ.get("PYTHONHASHSEED", DEFAULT_NONE_HASH_SEED)
    return sha256_pickle(seed)


def chain(token_ids: Sequence[int], block_size: int = BLOCK_SIZE, parent: bytes | None = None) -> list[bytes]:
    """The digests of the full blocks of `token_ids`, each chained on the one before."""
    digest = none_hash() if parent is None else parent
    out = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        digest = sha256_pickle((digest, tuple(token_ids[start : start + block_size]), None))
        out.append(digest)
    return out


def external(digest: bytes) -> int:
    """A digest as vLLM puts it on the event wire by default: an unsigned 64-bit integer."""
    return int.from_bytes(digest[-8:], "big")
