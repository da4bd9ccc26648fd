"""The KV-event subscriber against real ZMQ sockets on loopback: a publisher framed as
vLLM's (topic, 8-byte sequence, msgpack batch), its replay ROUTER, and an index.

A batch reaches the index within milliseconds here, so every wait is `WAIT` seconds, ample
on a busy machine, and one stops at once when the subscriber's task has ended: a broken
subscriber fails a test in a moment, not after a long wait (its mutants are run one by one)."""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import msgpack
import pytest
import zmq
import zmq.asyncio

from adapters.kv_events import KVEventDecodeError, decode_payload, vllm_block_hashes
from adapters.kv_events_zmq import KVEventSubscriber
from policies.kv_index import KVBlockIndex

RECORDING = Path(__file__).parents[1] / "policies" / "data" / "vllm-0.32-kv-events.json"
END = (-1).to_bytes(8, "big", signed=True)
WAIT = 3.0


def stored(hashes: list[int], parent: int | None = None) -> bytes:
    event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": [1] * 32,
             "block_size": 32, "lora_id": None, "medium": "GPU", "lora_name": None}  # fmt: skip
    return msgpack.packb([1.0, [event], 0])


async def until(predicate, sub: KVEventSubscriber | None = None) -> None:
    """Until `predicate` holds; fails after WAIT seconds, or at once when `sub`'s task ended."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while not predicate():
        task = sub._task if sub is not None else None
        if task is not None and task.done():
            raise AssertionError(f"the subscriber ended: {task!r}")
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.005)


def logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "switchyard.kv_events"]


async def racing(sub: KVEventSubscriber, waiting):
    """`waiting`'s result, failing at once if the subscriber's task ends first."""
    wait = asyncio.ensure_future(waiting)
    assert sub._task is not None
    done, _ = await asyncio.wait({wait, sub._task}, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
    if wait not in done:
        wait.cancel()
        raise AssertionError(f"timed out, or the subscriber ended: {sub._task!r}")
    return wait.result()


class Runtime:
    """The publishing side: an XPUB (a PUB that also sees subscriptions) and a replay ROUTER."""

    def __init__(self, ports: tuple[int, int] | None = None) -> None:
        self.ctx = zmq.asyncio.Context()
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, also one to a topic already held
        self.router = self.ctx.socket(zmq.ROUTER)
        if ports is None:  # a fresh runtime; else one started again where the last one was
            self.pub_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
            self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        else:
            self.pub_port, self.replay_port = ports
            self.pub.bind(f"tcp://127.0.0.1:{self.pub_port}")
            self.router.bind(f"tcp://127.0.0.1:{self.replay_port}")
        self.buffer: dict[int, bytes] = {}

    async def subscribed(self, topic: bytes = b"kv") -> None:
        """Until a subscription reaches the publisher (an old subscriber's leaving may come first)."""
        while (message := await asyncio.wait_for(self.pub.recv(), WAIT)) != b"\x01" + topic:
            assert message == b"\x00" + topic, message

    async def publish(self, seq: int, payload: bytes, *, lose: bool = False) -> None:
        self.buffer[seq] = payload
        if not lose:
            await self.pub.send_multipart([b"kv", seq.to_bytes(8, "big"), payload])

    async def serve_one_replay(self, *, with_topic: bool = True) -> int:
        """Answer one replay request as vLLM does: `(topic, seq, payload)` per batch (older
        vLLM: `(seq, payload)`), then sequence -1."""
        ident, delimiter, start = await asyncio.wait_for(self.router.recv_multipart(), WAIT)
        assert delimiter == b"" and len(start) == 8  # the request as vLLM reads it
        first = int.from_bytes(start, "big")
        topic = [b"kv"] if with_topic else []
        for seq in sorted(s for s in self.buffer if s >= first):
            await self.router.send_multipart([ident, b"", *topic, seq.to_bytes(8, "big"), self.buffer[seq]])
        await self.router.send_multipart([ident, b"", b"", END, b""])
        return first

    def close(self) -> None:
        self.pub.close(0)
        self.router.close(0)
        self.ctx.term()


@asynccontextmanager
async def subscriber(runtime: Runtime, index: KVBlockIndex, *, replay: bool = False, **options):
    """A subscriber of `runtime`'s publisher (and of its replay socket with `replay`),
    started and subscribed; closed on the way out."""
    endpoint = f"tcp://127.0.0.1:{runtime.replay_port}" if replay else None
    sub = KVEventSubscriber(
        "v", f"tcp://127.0.0.1:{runtime.pub_port}", index, replay_endpoint=endpoint, topic="kv", **options
    )
    sub.start()
    try:
        await racing(sub, runtime.subscribed())
        yield sub
    finally:
        await sub.aclose()


@pytest.fixture
async def runtime():
    r = Runtime()
    yield r
    r.close()


async def test_recorded_vllm_batches_reach_the_index_in_order(runtime):
    rec = json.loads(RECORDING.read_text())
    index = KVBlockIndex()
    async with subscriber(runtime, index) as sub:
        for frame in rec["frames"]:
            topic, seq, payload = (bytes.fromhex(f) for f in frame)
            await runtime.publish(int.from_bytes(seq, "big"), payload)
        await until(lambda: index.last_seq == 1, sub)
        b = rec["prompts"]["b"]
        assert index.match(vllm_block_hashes(b, index.block_size)) == 4
        assert (sub.stats.batches, sub.stats.replays, index.gaps) == (2, 0, 0)


async def test_a_gap_is_filled_from_the_replay_socket(runtime):
    index = KVBlockIndex()
    async with subscriber(runtime, index, replay=True) as sub:
        await runtime.publish(0, stored([1, 2]))
        await until(lambda: index.last_seq == 0, sub)
        await runtime.publish(1, stored([3], parent=2), lose=True)  # the subscriber never sees this one
        await runtime.publish(2, stored([4], parent=3))
        assert await racing(sub, runtime.serve_one_replay()) == 1
        await until(lambda: index.last_seq == 2, sub)
        assert index.match([1, 2, 3, 4]) == 4 and index.gaps == 0
        assert (sub.stats.replays, sub.stats.replayed_batches, sub.stats.replay_failures) == (1, 1, 0)


async def test_without_a_replay_a_gap_clears_the_index(runtime):
    index = KVBlockIndex()
    async with subscriber(runtime, index, replay=True, replay_timeout_s=0.3) as sub:
        await runtime.publish(0, stored([1, 2]))
        await until(lambda: index.last_seq == 0, sub)
        await runtime.publish(1, stored([9]), lose=True)
        await runtime.publish(2, stored([5]))  # nobody answers the replay request
        await until(lambda: index.last_seq == 2, sub)
        assert index.match([1]) == 0 and index.match([5]) == 1 and index.gaps == 1
        assert sub.stats.replay_failures == 1


async def test_a_publisher_started_again_is_a_new_start_even_when_its_numbers_look_like_the_next(runtime, caplog):
    index = KVBlockIndex()
    caplog.set_level(logging.WARNING, logger="switchyard.kv_events")
    async with subscriber(runtime, index, replay=True) as sub:
        await runtime.publish(0, stored([1, 2]))
        await until(lambda: index.last_seq == 0, sub)
        runtime.close()
        again = Runtime((runtime.pub_port, runtime.replay_port))
        try:
            # The new process's batches 0 and 1 go out before the subscription reaches it:
            # numbered from 0 again, its first batch heard (1) would pass for the old one's next.
            await again.publish(0, stored([7, 8]), lose=True)
            await again.publish(1, stored([9], parent=8), lose=True)
            await racing(sub, again.subscribed())
            assert await racing(sub, again.serve_one_replay()) == 0  # asked for everything it buffers
            await until(lambda: index.last_seq == 1, sub)
            assert index.match([1, 2]) == 0  # the old process's cache is gone
            assert index.match([7, 8, 9]) == 3
            assert (index.reconnects, index.restarts, index.gaps, sub.stats.reconnects) == (1, 0, 0, 1)
            assert logged(caplog) == ["kv events from v: publisher reconnected; its index starts over"]
        finally:
            again.close()


async def test_an_undecodable_batch_is_skipped_counted_and_logged(runtime, caplog):
    bad = b"\xc1not msgpack"
    with pytest.raises(KVEventDecodeError) as why:
        decode_payload(bad)
    index = KVBlockIndex()
    with caplog.at_level(logging.WARNING, logger="switchyard.kv_events"):
        async with subscriber(runtime, index) as sub:
            await runtime.publish(0, bad)
            await runtime.pub.send_multipart([b"kv", b"\x00" * 8])  # two frames: not a batch
            await runtime.publish(1, bad)
            await runtime.publish(2, stored([7]))
            await until(lambda: index.last_seq == 2, sub)
    assert sub.stats.undecodable == 3 and index.match([7]) == 1
    assert logged(caplog) == [f"kv events from v: batch {seq} skipped: {why.value}" for seq in (0, 1)]


@pytest.mark.parametrize("with_topic", [True, False])
async def test_every_gap_asks_for_a_replay_and_both_replay_shapes_are_read(runtime, with_topic):
    index = KVBlockIndex()
    async with subscriber(runtime, index, replay=True) as sub:
        await runtime.publish(0, stored([1, 2]))
        await until(lambda: index.last_seq == 0, sub)
        for lost, heard in ((1, 2), (3, 4)):
            await runtime.publish(lost, stored([10 + lost]), lose=True)
            await runtime.publish(heard, stored([10 + heard]))
            assert await racing(sub, runtime.serve_one_replay(with_topic=with_topic)) == lost
            await until(lambda heard=heard: index.last_seq == heard, sub)
        assert index.match([11]) == 1 and index.match([13]) == 1 and index.gaps == 0
        assert (sub.stats.replays, sub.stats.replayed_batches, sub.stats.replay_failures) == (2, 2, 0)


async def test_without_a_topic_every_topic_is_heard(runtime):
    index = KVBlockIndex()
    sub = KVEventSubscriber("v", f"tcp://127.0.0.1:{runtime.pub_port}", index)
    sub.start()
    try:
        assert await racing(sub, runtime.pub.recv()) == b"\x01"  # subscribed to everything
        await runtime.publish(0, stored([3]))
        await until(lambda: index.last_seq == 0, sub)
    finally:
        await sub.aclose()


async def test_a_closed_subscriber_stops_and_may_be_started_again(runtime):
    index = KVBlockIndex()
    async with subscriber(runtime, index) as sub:
        await runtime.publish(0, stored([1]))
        await until(lambda: index.last_seq == 0, sub)
        task = sub._task
    assert task is not None and task.done() and sub._task is None  # cancelled and awaited
    sub.start()  # a reload starts it again
    try:
        await racing(sub, runtime.subscribed())
        await runtime.publish(1, stored([2]))
        await until(lambda: index.last_seq == 1, sub)
    finally:
        await sub.aclose()


async def test_every_failed_replay_is_counted_and_logged(runtime, caplog):
    index = KVBlockIndex()
    caplog.set_level(logging.WARNING, logger="switchyard.kv_events")
    async with subscriber(runtime, index, replay=True, replay_timeout_s=0.2) as sub:
        await runtime.publish(0, stored([1]))
        await until(lambda: index.last_seq == 0, sub)
        for first in (1, 4):  # two batches lost each time; nobody answers either replay request
            await runtime.publish(first, stored([9]), lose=True)
            await runtime.publish(first + 1, stored([9]), lose=True)
            await runtime.publish(first + 2, stored([5]))
            await until(lambda first=first: index.last_seq == first + 2, sub)
        assert (sub.stats.replays, sub.stats.replay_failures, sub.stats.replayed_batches) == (2, 2, 0)
    assert logged(caplog) == [
        f"kv events from v: replay of {a}..{b} failed: TimeoutError()" for a, b in ((1, 2), (4, 5))
    ]


async def test_its_tasks_are_named_after_the_backend(runtime):
    async with subscriber(runtime, KVBlockIndex()):
        names = {task.get_name() for task in asyncio.all_tasks()}
    assert {"kv-events-v", "kv-events-v-connection"} <= names


async def test_a_replay_cancelled_as_its_answer_arrives_is_cancelled():
    # Closing the subscriber (a reload, a shutdown) cancels a replay in progress; a cancel that
    # lands as the replay's answer arrives must not be lost, or the subscriber never closes.
    answer = asyncio.get_running_loop().create_future()

    class Dealer:  # the replay socket, answering when the test says
        def connect(self, endpoint: str) -> None: ...

        async def send_multipart(self, frames: list[bytes]) -> None: ...

        def recv_multipart(self) -> asyncio.Future:
            return answer

        def close(self, linger: int | None = None) -> None: ...

    sub = KVEventSubscriber("v", "tcp://127.0.0.1:9", KVBlockIndex(), replay_endpoint="tcp://127.0.0.1:9")
    sub._ctx = SimpleNamespace(socket=lambda kind: Dealer())
    replay = asyncio.create_task(sub._replay(range(0, 5)))
    for _ in range(3):
        await asyncio.sleep(0)  # the replay waits for its answer
    answer.set_result([b"", b"kv", END, b""])
    replay.cancel()
    with pytest.raises(asyncio.CancelledError):
        await replay
