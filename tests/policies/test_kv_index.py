"""The KV-event index against event sequences built as vLLM and SGLang publish them
(msgpack bytes, sequence numbers), with gaps, restarts, expiry and its memory bound."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgpack
import pytest

from adapters.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    KVEventDecodeError,
    decode_payload,
    sglang_block_hashes,
    vllm_block_hashes,
)
from policies.kv_index import KVBlockIndex, KVIndexSettings, SeqVerdict
from tests.manual_clock import Clock

BIG = 2**64 - 5  # vLLM's hashes are unsigned 64-bit: msgpack uint64


def vllm_stored(hashes, parent=None, block_size=16, medium="GPU", tokens=None) -> dict:
    """A BlockStored as vLLM 0.32 encodes it: a map tagged by `type`, defaults omitted."""
    return {
        "type": "BlockStored",
        "block_hashes": list(hashes),
        "parent_block_hash": parent,
        "token_ids": tokens if tokens is not None else list(range(block_size * len(hashes))),
        "block_size": block_size,
        "lora_id": None,
        "medium": medium,
        "lora_name": None,
        "extra_keys": [None] * len(hashes),
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",
    }


def vllm_removed(hashes, medium="GPU") -> dict:
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": medium, "group_idx": 0}


def payload(*events, ts=1.5, rank=0) -> bytes:
    """KVEventBatch: a positional array [ts, events, data_parallel_rank]."""
    return msgpack.packb([ts, list(events), rank])


# ---- decoding ---------------------------------------------------------------------


def test_a_vllm_batch_decodes_to_the_contract_events():
    batch = decode_payload(
        payload(vllm_stored([11, BIG], parent=7), vllm_removed([3]), {"type": "AllBlocksCleared"}, rank=1)
    )
    assert batch == KVEventBatch(
        1.5,
        (BlockStored((11, BIG), 7, 16, "GPU"), BlockRemoved((3,), "GPU"), AllBlocksCleared()),
        1,
    )


def test_digest_hashes_are_reduced_to_their_low_64_bits():
    # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 publishes the raw SHA-256 digests.
    digest = hashlib.sha256(b"block").digest()
    batch = decode_payload(payload(vllm_stored([digest], parent=digest)))
    low = int.from_bytes(digest, "big") & (2**64 - 1)
    assert batch.events[0] == BlockStored((low,), low, 16, "GPU")


def test_the_positional_event_shape_of_older_releases_decodes_too():
    old = msgpack.packb(
        [
            2.0,
            [
                ["BlockStored", [5, 6], None, list(range(32)), 16, None, "GPU"],
                ["BlockRemoved", [5]],
                ["AllBlocksCleared"],
            ],
        ]
    )
    assert decode_payload(old) == KVEventBatch(
        2.0, (BlockStored((5, 6), None, 16, "GPU"), BlockRemoved((5,), None), AllBlocksCleared()), None
    )


def test_an_sglang_batch_decodes_alike():
    # SGLang: the same tagged maps, signed 64-bit hashes, attn_dp_rank third.
    stored = {"type": "BlockStored", "block_hashes": [-9, 4], "parent_block_hash": None, "token_ids": [1, 2],
              "block_size": 1, "lora_id": None, "medium": "GPU", "cache_salt": None}  # fmt: skip
    batch = decode_payload(msgpack.packb([3.0, [stored, {"type": "BlockRemoved", "block_hashes": [-9]}], 2]))
    assert batch == KVEventBatch(3.0, (BlockStored((-9, 4), None, 1, "GPU"), BlockRemoved((-9,), None)), 2)


def test_unknown_event_kinds_are_skipped_and_garbage_is_refused():
    batch = decode_payload(payload({"type": "BlockPromoted", "block_hashes": [1]}, vllm_removed([2])))
    assert batch.events == (BlockRemoved((2,), "GPU"),)
    for bad in (b"\xc1", msgpack.packb({"ts": "x"}), msgpack.packb([1.0, [{"block_hashes": [1]}]]), msgpack.packb(7)):
        with pytest.raises(KVEventDecodeError):
            decode_payload(bad)
    with pytest.raises(KVEventDecodeError):
        decode_payload(payload(vllm_stored(["not a hash"])))


# ---- the index ----------------------------------------------------------------------


def test_stored_removed_and_cleared():
    index = KVBlockIndex()
    index.apply(decode_payload(payload(vllm_stored([1, 2, 3]), vllm_stored([4], parent=3))))
    assert index.match([1, 2, 3, 4, 5]) == 4
    index.apply(decode_payload(payload(vllm_removed([3]))))
    assert index.match([1, 2, 3, 4]) == 2
    index.apply(decode_payload(payload({"type": "AllBlocksCleared"})))
    assert index.match([1]) == 0 and len(index) == 0


def test_only_blocks_on_the_device_count():
    index = KVBlockIndex()
    index.apply(decode_payload(payload(vllm_stored([1, 2]), vllm_stored([9], medium="CPU"))))
    assert index.match([1, 2]) == 2 and index.match([9]) == 0
    index.apply(decode_payload(payload(vllm_removed([1], medium="CPU"))))  # its host copy went, not the GPU one
    assert index.match([1, 2]) == 2


def test_the_block_size_is_learned_unless_configured():
    learned = KVBlockIndex()
    assert learned.block_size is None
    learned.apply(decode_payload(payload(vllm_stored([1], block_size=16), vllm_stored([2], block_size=7))))
    assert learned.block_size == 16  # a partial block does not shrink it
    configured = KVBlockIndex(KVIndexSettings(block_size=32))
    configured.apply(decode_payload(payload(vllm_stored([1], block_size=16))))
    assert configured.block_size == 32


def test_a_recorded_sequence_with_a_gap_and_a_restart():
    index = KVBlockIndex()
    stream = [
        (0, payload(vllm_stored([1, 2]))),
        (1, payload(vllm_stored([3], parent=2))),
        # 2 is lost: it removed block 1, so the index would lie about it
        (3, payload(vllm_stored([10, 11]))),
        (4, payload(vllm_stored([12], parent=11))),
        # the runtime restarted: numbering starts again with an empty cache
        (0, payload(vllm_stored([20]))),
    ]
    verdicts = []
    for seq, raw in stream[:3]:
        verdicts.append(index.receive(seq, decode_payload(raw)))
    assert verdicts == [SeqVerdict.NEXT, SeqVerdict.NEXT, SeqVerdict.GAP]
    assert index.match([1, 2, 3]) == 0  # cleared at the gap: nothing from before it is trusted
    assert index.match([10, 11]) == 2
    assert index.receive(*_decoded(stream[3])) is SeqVerdict.NEXT
    assert index.receive(*_decoded(stream[4])) is SeqVerdict.RESTART
    assert index.match([10, 11, 12]) == 0 and index.match([20]) == 1
    assert (index.stats().gaps, index.stats().restarts, index.stats().last_seq) == (1, 1, 0)


def _decoded(item):
    seq, raw = item
    return seq, decode_payload(raw)


def test_missing_says_what_to_ask_a_replay_for():
    index = KVBlockIndex()
    assert index.missing(5) == range(0, 5)  # the first batch: what the runtime cached before we came
    index.receive(5, KVEventBatch(0.0, ()))
    assert index.missing(6) == range(0)
    assert index.missing(9) == range(6, 9)
    assert index.missing(2) == range(0)  # a restart, not a gap


def test_entries_expire_unless_announced_again():
    clock = Clock(1000.0)
    index = KVBlockIndex(KVIndexSettings(max_age_s=60), clock=clock)
    index.apply(KVEventBatch(0.0, (BlockStored((1, 2), None, 16),)))
    clock.now += 50
    index.apply(KVEventBatch(0.0, (BlockStored((1,), None, 16),)))  # block 1 stored again
    clock.now += 20
    assert index.match([1, 2]) == 1
    assert KVBlockIndex(KVIndexSettings(max_age_s=None), clock=clock).match([1]) == 0


def test_memory_is_bounded_least_recently_stored_first():
    index = KVBlockIndex(KVIndexSettings(max_blocks=3))
    index.apply(KVEventBatch(0.0, (BlockStored((1, 2, 3), None, 16), BlockStored((4,), 3, 16))))
    assert len(index) == 3 and index.match([1]) == 0 and index.match([4]) == 1
    with pytest.raises(ValueError):
        KVBlockIndex(KVIndexSettings(max_blocks=0))


# ---- the runtimes' hashes --------------------------------------------------------------


def test_vllm_hashes_name_a_prompts_full_blocks_by_their_whole_prefix():
    ids = list(range(1000, 1100))
    hashes = vllm_block_hashes(ids, 16)
    assert len(hashes) == 100 // 16 and all(0 <= h < 2**64 for h in hashes)
    assert vllm_block_hashes(ids[:40], 16) == hashes[:2]
    changed = vllm_block_hashes([0] + ids[1:], 16)
    assert all(a != b for a, b in zip(hashes, changed))  # block 0 differs, so every later one does
    assert vllm_block_hashes(ids, 16, seed="0") != hashes  # PYTHONHASHSEED changes the chain's root
    assert vllm_block_hashes(ids, 16, algorithm="sha256_cbor") != hashes
    assert vllm_block_hashes(ids[:15], 16) == []


def test_sglang_hashes_are_signed_64_bit_and_chained():
    ids = list(range(50))
    hashes = sglang_block_hashes(ids, 4)
    assert len(hashes) == 12 and all(-(2**63) <= h < 2**63 for h in hashes)
    assert sglang_block_hashes(ids[:8], 4) == hashes[:2]
    first_page = hashlib.sha256(b"".join(t.to_bytes(4, "little") for t in ids[:4])).digest()
    assert hashes[0] == int.from_bytes(first_page[:8], "big", signed=True)


def test_a_runtime_publishing_a_prompts_blocks_matches_the_next_prompt_sharing_it():
    shared = list(range(500, 548))  # three blocks of 16
    first, second = shared + [1, 2, 3, 4] * 8, shared + [9] * 40
    index = KVBlockIndex()
    stored = vllm_block_hashes(first, 16)
    index.receive(0, decode_payload(payload(vllm_stored(stored, tokens=first[: 16 * len(stored)]))))
    assert index.match(vllm_block_hashes(second, index.block_size)) == 3


# ---- a recording of a real vLLM 0.32 -------------------------------------------------


def recorded() -> dict:
    return json.loads((Path(__file__).parent / "data" / "vllm-0.32-kv-events.json").read_text())


def test_the_recorded_vllm_frames_decode_and_their_hashes_are_ours():
    rec = recorded()
    bs = rec["block_size"]
    a, b = rec["prompts"]["a"], rec["prompts"]["b"]
    (topic0, seq0, raw0), (topic1, seq1, raw1) = ([bytes.fromhex(f) for f in frame] for frame in rec["frames"])
    assert (topic0, int.from_bytes(seq0, "big"), topic1, int.from_bytes(seq1, "big")) == (b"kv", 0, b"kv", 1)
    first, second = decode_payload(raw0), decode_payload(raw1)
    # Prompt a stored its 5 full blocks; b then stored only its 4th, chained to a's 3rd.
    assert first.events[0] == BlockStored(tuple(vllm_block_hashes(a, bs)), None, bs, "GPU")
    assert second.events[0] == BlockStored((vllm_block_hashes(b, bs)[3],), vllm_block_hashes(a, bs)[2], bs, "GPU")
    index = KVBlockIndex()
    index.receive(0, first)
    assert index.block_size == bs
    assert index.match(vllm_block_hashes(a, bs)) == 5 and index.match(vllm_block_hashes(b, bs)) == 3
    index.receive(1, second)
    assert index.match(vllm_block_hashes(b, bs)) == 4


def test_the_recorded_replay_answers_with_the_same_batches_then_the_end_marker():
    rec = recorded()
    replayed = [[bytes.fromhex(f) for f in frame] for frame in rec["replay"]]
    # After the DEALER's empty delimiter: topic, sequence, payload; the end marker has sequence -1.
    assert [(f[0], f[1], int.from_bytes(f[2], "big", signed=True)) for f in replayed] == [
        (b"", b"kv", 0),
        (b"", b"kv", 1),
        (b"", b"", -1),
    ]
    assert [f[3] for f in replayed[:2]] == [bytes.fromhex(frame[2]) for frame in rec["frames"]]
