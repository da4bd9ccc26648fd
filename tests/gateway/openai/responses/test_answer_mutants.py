"""What a mutation run of gateway/openai/responses/answer.py left open: the answer's id
is the response's, a stored stream's terminal object is the very object stored (not
one built again a second later), and a store failure without a code is counted as
"error"."""

from __future__ import annotations

import itertools

from adapters.base import Finish, TextDelta, Usage
from adapters.errors import GatewayError
from conformance.responses_sse import parse_responses_stream
from gateway.openai.responses import MemoryResponseStore, prepare_response
from gateway.openai.responses.answer import ResponsesAnswer

TEXT = [TextDelta(0, "a"), TextDelta(0, "b"), Finish(0, "stop")]


async def _answer(store, stream: bool, not_stored=None) -> ResponsesAnswer:
    body = {"model": "m", "input": "hi", "stream": stream}
    prepared = await prepare_response(body, tenant="t", store=store, request_id="r")
    return ResponsesAnswer(prepared, store, not_stored)


async def test_the_answer_is_named_by_its_response_id():
    store = MemoryResponseStore()
    whole = await _answer(store, False)
    assert whole.response_id == whole.prepared.shell.id and whole.response_id.startswith("resp_")
    for event in TEXT:
        whole.whole_feed(event)
    assert (await whole.whole_body(Usage(1, 2)))["id"] == whole.response_id


async def test_a_stored_stream_ends_with_the_object_it_stored():
    """The terminal event carries the stored object itself: with a clock that moves
    on every reading, an object built again would have another completed_at."""
    store = MemoryResponseStore()
    streamed = await _answer(store, True)
    ticks = itertools.count(1_000_000, 7)
    streamed.assembly.clock = lambda: float(next(ticks))
    raw = streamed.stream_start() + b"".join(streamed.stream_feed(e) for e in TEXT)
    parsed = parse_responses_stream(raw + await streamed.stream_end(Usage(1, 2)))
    assert parsed.violations == [] and parsed.final is not None
    stored = (await store.get("t", streamed.response_id)).response
    assert parsed.final == stored and stored["completed_at"] == 1_000_000


class _CodelessFailure(MemoryResponseStore):
    async def put(self, tenant, record) -> None:
        raise GatewayError(500, "The store broke.")


async def test_a_store_failure_without_a_code_is_counted_as_error():
    counted: list[str] = []
    for stream in (False, True):
        store = _CodelessFailure()
        answer = await _answer(store, stream, counted.append)
        if stream:
            raw = answer.stream_start() + b"".join(answer.stream_feed(e) for e in TEXT)
            final = parse_responses_stream(raw + await answer.stream_end(Usage(1, 2))).final
        else:
            for event in TEXT:
                answer.whole_feed(event)
            final = await answer.whole_body(Usage(1, 2))
        assert final is not None and final["status"] == "completed"
    assert counted == ["error", "error"]
