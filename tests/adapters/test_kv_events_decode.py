"""adapters/kv_events.py on its own: every shape of a batch and an event the decoder reads
(positional and named, vLLM's and SGLang's rank), each refusal with its words, and the
runtimes' block hashes at the boundary of a full block."""

from __future__ import annotations

import hashlib

import cbor2
import msgpack
import pytest

from adapters.kv_events import (
    VLLM_DEFAULT_SEED,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventDecodeError,
    decode_batch,
    decode_payload,
    sglang_block_hashes,
    vllm_block_hashes,
)


def test_a_positional_stored_event_reads_its_parent_size_and_medium() -> None:
    raw = ["BlockStored", [b"\x00" * 7 + b"\x05", 6], 4, [1, 2], 16, None, "CPU", "extra"]
    batch = decode_batch([2.5, [raw, ["BlockRemoved", [6], "GPU"], ["AllBlocksCleared"]], 1])
    assert batch.events == (BlockStored((5, 6), 4, 16, "CPU"), BlockRemoved((6,), "GPU"), AllBlocksCleared())
    assert (batch.ts, batch.data_parallel_rank) == (2.5, 1)


def test_a_stored_event_without_a_size_has_size_zero() -> None:
    assert decode_batch([0, [{"type": "BlockStored", "block_hashes": [1]}]]).events == (BlockStored((1,), None, 0),)


@pytest.mark.parametrize(
    ("batch", "rank"),
    [
        ({"ts": 1, "events": [], "data_parallel_rank": 2}, 2),
        ({"ts": 1, "events": [], "attn_dp_rank": 3}, 3),  # SGLang's name
        ({"ts": 1, "events": [], "data_parallel_rank": 2, "attn_dp_rank": 3}, 2),
        ({"ts": 1, "events": [], "data_parallel_rank": "2"}, None),  # not a number: no rank
        ([1, []], None),
    ],
)
def test_a_named_batch_and_its_rank(batch, rank) -> None:
    got = decode_batch(batch)
    assert (got.ts, got.events, got.data_parallel_rank) == (1.0, (), rank)


def test_a_named_batch_reads_its_events() -> None:
    got = decode_batch({"ts": 4, "events": [{"type": "BlockRemoved", "block_hashes": [9]}]})
    assert got.events == (BlockRemoved((9,)),)


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        ([1], "a batch is [ts, events, rank]"),
        ({"ts": "x", "events": []}, "a batch needs a numeric ts and an array of events"),
        ([1, "events"], "a batch needs a numeric ts and an array of events"),
        ([1, [7]], "an event is a map or an array, not int"),
        ([1, [[]]], "a positional event needs its tag first"),
        ([1, [[5, [1]]]], "a positional event needs its tag first"),
        ([1, [{"block_hashes": [1]}]], "an event map needs a string `type`"),
        ([1, [{"type": "BlockRemoved", "block_hashes": 5}]], "block_hashes must be an array"),
        ([1, [{"type": "BlockRemoved", "block_hashes": ["x"]}]], "a block hash must be an integer or bytes, not str"),
        ([1, [{"type": "BlockRemoved", "block_hashes": [True]}]], "a block hash must be an integer or bytes, not bool"),
    ],
)
def test_what_is_not_a_batch_is_refused_with_its_reason(obj, words) -> None:
    with pytest.raises(KVEventDecodeError) as info:
        decode_batch(obj)
    assert str(info.value) == words


def test_an_event_kind_added_later_is_skipped() -> None:
    assert decode_batch([1, [{"type": "BlockMoved"}, ["BlockMoved", [1]]]]).events == ()


def test_a_payload_reads_strings_as_text_and_maps_with_number_keys() -> None:
    event = {"type": "BlockStored", "block_hashes": [1], "medium": "GPU", "extra": {1: "lora"}}
    got = decode_payload(msgpack.packb([1.0, [event], None]))
    assert got.events == (BlockStored((1,), None, 0, "GPU"),)


def test_a_payload_that_is_not_msgpack_is_refused() -> None:
    with pytest.raises(KVEventDecodeError) as info:
        decode_payload(b"\x01\x02")  # one value, then extra bytes
    assert str(info.value).startswith("not msgpack: ") and len(str(info.value)) > len("not msgpack: ")


def cbor_hash(obj) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def test_vllm_cbor_hashes_chain_each_full_block_from_the_seed() -> None:
    ids = [3, 1, 4, 1, 5, 9]
    parent = cbor_hash(VLLM_DEFAULT_SEED)
    want = []
    for block in ((3, 1, 4), (1, 5, 9)):
        parent = cbor_hash((parent, block, None))
        want.append(int.from_bytes(parent, "big") & ((1 << 64) - 1))
    assert vllm_block_hashes(ids, 3, "sha256_cbor") == want


@pytest.mark.parametrize(("length", "blocks"), [(5, 1), (6, 2), (7, 2), (2, 0), (3, 1)])
def test_only_full_blocks_are_hashed(length, blocks) -> None:
    ids = list(range(length))
    assert len(vllm_block_hashes(ids, 3)) == blocks
    assert len(sglang_block_hashes(ids, 3)) == blocks
