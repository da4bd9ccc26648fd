"""A backend's KV-event feed (gateway/backends/kv_feeds.py) on its own: which prompts can
be named and how much of them, the in-process queue's bound at, below and above
`MAX_PENDING` (past it the index starts over), names hashed once per decision per scheme
and block size, the match, the uncached tokens and the expectation it hands the index,
and the feed each runtime gets (vLLM's and SGLang's hashes over ZMQ, the native engine's
own names in process)."""

from __future__ import annotations

import sys

import pytest

from adapters.base import GenerationRequest
from adapters.kv_events import AllBlocksCleared, BlockStored, sglang_block_hashes, vllm_block_hashes
from gateway.backends import kv_feeds
from gateway.backends.kv_feeds import MAX_HASHED_BLOCKS, KVFeed, build_feed, prompt_token_ids
from gateway.config.schema import BackendConfig
from policies.kv_index import KVBlockIndex, KVIndexSettings
from processes.install import install_hint


def completion(ids: list[int]) -> GenerationRequest:
    return GenerationRequest("r", "m", prompt=ids, kind="completion")


def feed(block_size: int | None = 2, hasher=None, scheme: tuple = ("s",), own: bool = False) -> KVFeed:
    index = KVBlockIndex(KVIndexSettings(block_size=block_size))
    return KVFeed(index, hasher or (lambda req, size: list(range(1, 5))), scheme, names_own_blocks=own)


def test_only_a_prompt_of_token_ids_is_named_and_only_its_head():
    ids = list(range(MAX_HASHED_BLOCKS * 2 + 5))
    assert prompt_token_ids(completion(ids), 2) == ids[: MAX_HASHED_BLOCKS * 2]
    assert prompt_token_ids(completion([1, 2, 3]), 2) == [1, 2, 3]
    assert prompt_token_ids(GenerationRequest("r", "m", prompt="text", kind="completion"), 2) is None
    assert prompt_token_ids(GenerationRequest("r", "m", messages=[], prompt=[1, 2]), 2) is None  # a chat
    assert MAX_HASHED_BLOCKS == 256


@pytest.mark.parametrize("queued", [2, 3, 4])
def test_the_queue_holds_max_pending_events_and_past_it_the_index_starts_over(monkeypatch, queued):
    monkeypatch.setattr(kv_feeds, "MAX_PENDING", 3)
    f = feed()
    f.sink(BlockStored((100,), block_size=2))
    f.drain()
    assert f.index.match([100]) == 1
    events = [BlockStored((i,), block_size=2) for i in range(queued)]
    for event in events:
        f.sink(event)
    over = queued > 3
    assert f.overflowed is over
    assert list(f.pending) == (events[3:] if over else events)
    f.drain()
    assert not f.overflowed and not f.pending
    # an overflow lost events: what was stored before is forgotten, what came after is kept
    assert f.index.match([100]) == (0 if over else 1)
    assert f.index.match([queued - 1]) == 1


def test_draining_nothing_applies_nothing():
    f = feed()
    applied = []
    f.index.apply = applied.append  # type: ignore[method-assign]
    f.drain()
    assert applied == []
    f.sink(AllBlocksCleared())
    f.drain()
    assert [b.events for b in applied] == [(AllBlocksCleared(),)]
    assert applied[0].ts > 0


def test_blocks_are_named_once_the_size_is_known_and_once_per_scheme_and_size():
    calls = []

    def hasher(req, size):
        calls.append(size)
        return [size]

    unknown = feed(None, hasher)
    assert unknown.hashes(completion([1]), {}) is None and calls == []
    hashed: dict = {}
    two, two_again, four = feed(2, hasher), feed(2, hasher), feed(4, hasher)
    other_scheme = feed(2, hasher, scheme=("other",))
    assert two.hashes(completion([1]), hashed) == [2]
    assert two_again.hashes(completion([1]), hashed) == [2]
    assert four.hashes(completion([1]), hashed) == [4]
    assert other_scheme.hashes(completion([1]), hashed) == [2]
    assert calls == [2, 4, 2] and set(hashed) == {(("s",), 2), (("s",), 4), (("other",), 2)}
    # an engine naming its own blocks needs no size: it is asked with 0, keyed by its scheme alone
    own = feed(None, hasher, own=True)
    assert own.hashes(completion([1]), hashed) == [0] and (("s",), None) in hashed
    sized = feed(16, hasher, own=True)
    assert sized.hashes(completion([1]), hashed) == [0] and calls == [2, 4, 2, 0]


def test_a_match_reads_the_pending_events_first_and_says_none_where_nothing_is_named():
    f = feed(2, lambda req, size: [1, 2, 3, 4, 5])
    assert f.match(completion([1]), {}) == 0.0
    f.sink(BlockStored((1, 2, 3, 4), block_size=2))
    assert f.match(completion([1]), {}) == 0.8
    assert feed(2, lambda req, size: None).match(completion([1]), {}) is None
    assert feed(2, lambda req, size: []).match(completion([1]), {}) is None
    assert feed(None).match(completion([1]), {}) is None


def test_the_uncached_tokens_count_the_named_head_in_the_runtimes_block_size():
    f = feed(16, lambda req, size: [1, 2, 3, 4])
    assert f.uncached(completion([1]), {}, 100, 0.5) == 100 - 2 * 16
    assert f.uncached(completion([1]), {}, 100, 0.0) == 100
    nothing = feed(16, lambda req, size: None)
    assert nothing.uncached(completion([1]), {}, 100, 0.5) == 100
    own = feed(None, lambda req, size: [1, 2], own=True)
    assert own.uncached(completion([1]), {}, 100, 1.0) == 100 - 2 * kv_feeds.BLOCK_TOKENS


def test_a_routed_request_is_expected_where_it_went():
    f = feed(2, lambda req, size: list(req.prompt))
    f.expect(completion([7, 8, 9, 10]), {})
    assert f.index.match([7, 8, 9, 10]) == 4
    none = feed(2, lambda req, size: None)
    none.expect(completion([1]), {})
    assert none.index.stats().expected == 0


def backend(adapter: str, **kv) -> BackendConfig:
    events = {"endpoint": "tcp://127.0.0.1:1", **kv}
    return BackendConfig.model_validate(
        {"name": "b", "adapter": adapter, "url": "http://127.0.0.1:9", "kv_events": events}
    )


async def test_vllm_and_sglang_feeds_hash_token_ids_as_their_runtime_and_subscribe_where_it_publishes():
    ids = list(range(8))
    vllm = build_feed(backend("vllm", hash="sha256_cbor", hash_seed="7", topic="kv", replay_endpoint="tcp://r:2"), None)  # type: ignore[arg-type]
    assert vllm.scheme == ("vllm", "sha256_cbor", "7") and not vllm.names_own_blocks
    assert vllm.hasher(completion(ids), 4) == vllm_block_hashes(ids, 4, "sha256_cbor", "7")
    assert vllm.hasher(GenerationRequest("r", "m", prompt="text", kind="completion"), 4) is None
    sub = vllm.subscriber
    assert sub is not None and (sub.name, sub.endpoint, sub.replay_endpoint, sub.topic) == (
        "b",
        "tcp://127.0.0.1:1",
        "tcp://r:2",
        b"kv",
    )
    assert sub.consumer is vllm.index
    sglang = build_feed(backend("sglang"), None)  # type: ignore[arg-type]
    assert sglang.scheme == ("sglang",) and sglang.hasher(completion(ids), 4) == sglang_block_hashes(ids, 4)
    assert sglang.hasher(GenerationRequest("r", "m", prompt="text", kind="completion"), 4) is None
    assert sglang.subscriber is not None and sglang.subscriber.replay_endpoint is None


class Engine:
    def __init__(self) -> None:
        self.sinks: list = []

    def kv_block_hashes(self, req: GenerationRequest) -> list[int]:
        return [len(req.prompt or ())]

    def subscribe_kv_events(self, sink) -> None:
        self.sinks.append(sink)


def test_a_native_feed_takes_the_engines_events_and_names():
    engine = Engine()
    cfg = BackendConfig.model_validate(
        {"name": "n", "adapter": "native", "model_path": "builtin:tiny", "options": {"block_size": 8}}
    )
    f = build_feed(cfg, engine)  # type: ignore[arg-type]
    assert f.names_own_blocks and f.subscriber is None and f.scheme == ("native", "builtin:tiny", 8)
    assert engine.sinks == [f.sink] and f.hasher(completion([1, 2, 3]), 0) == [3]


def test_a_feed_over_zmq_without_pyzmq_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "adapters.kv_events_zmq", None)
    with pytest.raises(RuntimeError) as caught:
        build_feed(backend("vllm"), None)  # type: ignore[arg-type]
    assert str(caught.value).startswith(f"backend b: kv_events needs pyzmq and msgpack ({install_hint('kv-events')}): ")
