"""The vLLM double's KV-cache events (`--kv-events-config`), its bounded prefix cache
(`--num-gpu-blocks-override`) and `/reset_prefix_cache`: real simulator processes,
read by a plain ZMQ SUB socket and a DEALER on the replay socket. The block hashes
are checked against the gateway's own reading of vLLM's hashing
(adapters/kv_events.py), a second implementation of the same spec."""

from __future__ import annotations

import hashlib
import json
import pickle
import time
from typing import Any

import msgpack
import pytest
import zmq

from adapters.kv_events import BlockRemoved, BlockStored, decode_payload, vllm_block_hashes
from processes import free_port
from simulators.vllm_kv_hash import chain, external, none_hash
from tests.simulators.conftest import client


def _config(pub: int, replay: int | None = None, host: str = "127.0.0.1", **extra: Any) -> str:
    config: dict[str, Any] = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://{host}:{pub}"}
    if replay is not None:
        config["replay_endpoint"] = f"tcp://{host}:{replay}"
    config.update({"topic": "", **extra})
    return json.dumps(config)


class Subscriber:
    def __init__(self, port: int) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(f"tcp://127.0.0.1:{port}")
        time.sleep(0.5)  # PUB/SUB: the subscription reaches the publisher asynchronously

    def batch(self, timeout_s: float = 5.0) -> tuple[bytes, int, list[Any]]:
        if not self.sock.poll(int(timeout_s * 1000)):
            raise AssertionError("no KV-event batch published")
        topic, seq, payload = self.sock.recv_multipart()
        assert len(seq) == 8
        return topic, int.from_bytes(seq, "big"), msgpack.unpackb(payload, raw=False)

    def nothing(self, wait_s: float = 0.5) -> bool:
        return not self.sock.poll(int(wait_s * 1000))

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


def _complete(sim: Any, ids: list[int]) -> dict[str, Any]:
    body = {"model": "sim-model", "prompt": ids, "max_tokens": 1}
    return client(sim).post("/v1/completions", json=body).json()


# ---- hashes: the double against the gateway's reader and a fixed vector -------------


@pytest.mark.parametrize(
    "ids",
    [list(range(16)), list(range(100, 164)), [7] * 40, list(range(1000, 1015)), [151643, 872, 198] * 11],
)
def test_hashes_agree_with_the_gateway_reading_of_vllm(ids: list[int]) -> None:
    assert [external(d) for d in chain(ids)] == vllm_block_hashes(ids, 16, "sha256", None)


def test_known_vector_from_vllms_hash_logic() -> None:
    # vLLM: NONE_HASH = sha256(pickle("vllm-none-hash")); block = sha256(pickle((parent, tuple(ids), None)));
    # on the wire, int.from_bytes(digest, "big") & (2**64 - 1).
    def sha(obj: Any) -> bytes:
        return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()

    root = sha("vllm-none-hash")
    first = sha((root, tuple(range(16)), None))
    second = sha((first, tuple(range(16, 32)), None))
    expected = [int.from_bytes(d, "big") & (2**64 - 1) for d in (first, second)]
    assert expected == [3262291359910021016, 7142137847444424233]
    assert [external(d) for d in chain(list(range(32)))] == expected
    assert none_hash("vllm-none-hash") == root


# ---- events on the wire -------------------------------------------------------------


def test_block_stored_batches_with_sequence_numbers_and_chained_parents(make_sim) -> None:
    pub = free_port()
    sim = make_sim("vllm", kv_events_config=_config(pub), enable_prompt_tokens_details=True)
    sub = Subscriber(pub)
    try:
        ids = list(range(500, 540))  # two full blocks and 8 tokens
        _complete(sim, ids)
        topic, seq, batch = sub.batch()
        assert topic == b"" and seq == 0
        ts, events, rank = batch
        assert isinstance(ts, float) and rank == 0 and len(events) == 1
        stored = events[0]
        assert list(stored)[0] == "type" and stored["type"] == "BlockStored"
        hashes = vllm_block_hashes(ids, 16, "sha256", None)
        assert stored["block_hashes"] == hashes
        assert stored["parent_block_hash"] is None
        assert stored["token_ids"] == ids[:32]
        assert stored["block_size"] == 16 and stored["medium"] == "GPU" and stored["lora_id"] is None

        longer = ids + list(range(2000, 2024))  # 64 tokens: blocks 2 and 3 are new
        usage = _complete(sim, longer)["usage"]
        assert usage["prompt_tokens_details"] == {"cached_tokens": 32}
        _, seq, (_, events, _) = sub.batch()
        assert seq == 1
        all_hashes = vllm_block_hashes(longer, 16, "sha256", None)
        assert events[0]["block_hashes"] == all_hashes[2:]
        assert events[0]["parent_block_hash"] == all_hashes[1]
        assert events[0]["token_ids"] == longer[32:64]

        _complete(sim, longer)  # all cached: nothing new, no batch
        assert sub.nothing()
        _complete(sim, list(range(9000, 9016)))
        topic, seq, raw = sub.batch()
        assert seq == 2
        # The gateway's decoder reads the same batch.
        decoded = decode_payload(msgpack.packb(raw))
        assert decoded.events == (BlockStored(tuple(vllm_block_hashes(list(range(9000, 9016)), 16)), None, 16, "GPU"),)
    finally:
        sub.close()


def test_eviction_publishes_block_removed_and_forgets_the_prefix(make_sim) -> None:
    pub = free_port()
    # 5 blocks, one of them vLLM's null block: 4 hold tokens.
    sim = make_sim(
        "vllm", kv_events_config=_config(pub, host="*"), num_gpu_blocks_override=5, enable_prompt_tokens_details=True
    )
    sub = Subscriber(pub)
    try:
        a = list(range(1, 65))  # 4 blocks: the pool is full
        b = list(range(3001, 3033))  # 2 blocks
        ha, hb = vllm_block_hashes(a, 16), vllm_block_hashes(b, 16)
        _complete(sim, a)
        assert sub.batch()[2][1][0]["block_hashes"] == ha
        _complete(sim, b)
        _, _, (_, events, _) = sub.batch()
        # LRU, and within one request its last block first: a's two tail blocks go.
        removed = [e for e in events if e["type"] == "BlockRemoved"]
        assert [e["block_hashes"] for e in removed] == [[ha[3]], [ha[2]]]
        assert all(e["medium"] == "GPU" for e in removed)
        assert events[-1]["type"] == "BlockStored" and events[-1]["block_hashes"] == hb
        assert [type(e) for e in decode_payload(msgpack.packb([0.0, events, 0])).events] == [
            BlockRemoved,
            BlockRemoved,
            BlockStored,
        ]

        usage = _complete(sim, a)["usage"]  # only a's first two blocks are left
        assert usage["prompt_tokens_details"] == {"cached_tokens": 32}
        _, _, (_, events, _) = sub.batch()
        assert [e["block_hashes"] for e in events if e["type"] == "BlockRemoved"] == [[hb[1]], [hb[0]]]
        assert events[-1]["block_hashes"] == ha[2:] and events[-1]["parent_block_hash"] == ha[1]
        stats = client(sim).get("/_sim/stats").json()
        assert stats["kv_cache"]["blocks"] == 4 and stats["kv_cache"]["capacity"] == 4
        assert stats["kv_cache"]["evicted"] == 4
        assert stats["prefix_cache"]["hits"] == 32
    finally:
        sub.close()


def test_replay_resends_buffered_batches_and_reset_clears(make_sim) -> None:
    pub, replay = free_port(), free_port()
    sim = make_sim("vllm", kv_events_config=_config(pub, replay, topic="kv"), enable_prompt_tokens_details=True)
    sub = Subscriber(pub)
    try:
        prompts = [list(range(k * 100, k * 100 + 16)) for k in range(1, 4)]
        for ids in prompts:
            _complete(sim, ids)
        live = [sub.batch() for _ in prompts]
        assert [b[1] for b in live] == [0, 1, 2] and all(b[0] == b"kv" for b in live)

        ctx = zmq.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{replay}")
        try:
            dealer.send_multipart([b"", (1).to_bytes(8, "big")])
            got = []
            while True:
                assert dealer.poll(5000), "no replay answer"
                frames = dealer.recv_multipart()
                assert frames[0] == b""
                seq = int.from_bytes(frames[2], "big", signed=True)
                if seq == -1:
                    assert frames[1] == b"" and frames[3] == b""
                    break
                assert frames[1] == b"kv"
                got.append((seq, msgpack.unpackb(frames[3], raw=False)))
        finally:
            dealer.close(linger=0)
            ctx.term()
        assert [seq for seq, _ in got] == [1, 2]
        assert [batch for _, batch in got] == [b[2] for b in live[1:]]

        assert client(sim).post("/reset_prefix_cache").status_code == 200
        topic, seq, (_, events, _) = sub.batch()
        assert seq == 3 and events == [{"type": "AllBlocksCleared"}]
        assert _complete(sim, prompts[0])["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    finally:
        sub.close()


def test_null_publisher_publishes_nothing(make_sim) -> None:
    pub = free_port()
    config = json.dumps({"enable_kv_cache_events": True, "publisher": "null", "endpoint": f"tcp://127.0.0.1:{pub}"})
    sim = make_sim("vllm", kv_events_config=config, enable_prompt_tokens_details=True)
    sub = Subscriber(pub)
    try:
        _complete(sim, list(range(32)))
        assert sub.nothing()
        assert _complete(sim, list(range(32)))["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    finally:
        sub.close()
