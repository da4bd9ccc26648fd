"""Dispatcher and merge in process, on scripted adapters: failover only before the
first event, n > 1 fan-out and batched prompts merged with dense indices and one
usage, and nothing left open when a start fails."""

from __future__ import annotations

import asyncio

import pytest

from adapters.base import ErrorEvent, Event, Finish, GenerationRequest, SamplingParams, TextDelta, Usage
from adapters.errors import FailureKind, GatewayError
from gateway.serving.dispatch import Dispatcher, check_choices
from gateway.serving.merge import Merged, SubStream
from tests.gateway.scripted import HANG, ScriptedAdapter, always, backend_set


def chat(n: int = 1, seed: int | None = None, request_id: str = "req") -> GenerationRequest:
    return GenerationRequest(
        request_id=request_id,
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        sampling=SamplingParams(n=n, seed=seed),
        stream=True,
    )


def completion(prompts: list[str], n: int = 1) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            request_id=f"req-{i}", model="m", kind="completion", prompt=p, sampling=SamplingParams(n=n), stream=True
        )
        for i, p in enumerate(prompts)
    ]


def unavailable() -> GatewayError:
    return GatewayError(503, "down", code="backend_unavailable", failure=FailureKind.CONNECT)


def answer(text: str = "ok", usage: Usage | None = None) -> list:
    return [TextDelta(0, text), Finish(0, "stop"), usage or Usage(5, 1)]


def merge(subs, prompt_counted_once: bool) -> Merged:
    """`subs` (offset, events) merged, each read ahead from now on."""
    sink: asyncio.Queue = asyncio.Queue()
    streams = [SubStream(offset, events) for offset, events in subs]
    for stream in streams:
        stream.forward(sink)
    return Merged(streams, sink, prompt_counted_once)


async def drain(events) -> list[Event]:
    return [e async for e in events]


async def read(dispatched) -> list[Event]:
    """Every event of a dispatched request, then its end (as the generation does)."""
    events = await drain(dispatched.events)
    await dispatched.aclose()
    return events


def two_models(primary: ScriptedAdapter, fallback: ScriptedAdapter, **model) -> Dispatcher:
    models = {"m": {"backends": ["b1"], "fallback": ["m2"], "max_retries": 0, **model}, "m2": {"backends": ["b2"]}}
    return Dispatcher(backend_set(models, {"b1": primary, "b2": fallback}))


# ---- failover: before the first event, never after ---------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        [unavailable()],  # refused before anything
        [ErrorEvent(unavailable())],  # an error as the first event (SGLang's full queue, TGI's overload)
    ],
    ids=["raised", "first-event"],
)
async def test_a_retryable_failure_before_the_first_event_fails_over(failure):
    b1, b2 = ScriptedAdapter("b1", always(*failure)), ScriptedAdapter("b2", lambda r: answer("from b2"))
    dispatcher = two_models(b1, b2)
    dispatched = await dispatcher.open("m", [chat()])
    assert dispatched.backends == ("b2",)
    assert await read(dispatched) == [TextDelta(0, "from b2"), Finish(0, "stop"), Usage(5, 1)]
    assert (b1.ended, b2.ended) == (1, 1)
    assert [b.inflight for b in dispatcher.backends.backends.values()] == [0, 0]


async def test_a_second_round_after_the_backoff_reaches_the_same_backend():
    calls = []

    def flaky(request):
        calls.append(request)
        return [unavailable()] if len(calls) == 1 else answer("second round")

    backoff = []
    b1 = ScriptedAdapter("b1", flaky)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"], "retry_backoff_s": 0.001}}, {"b1": b1}))
    dispatched = await dispatcher.open("m", [chat()], backoff.append)
    assert (await read(dispatched))[0] == TextDelta(0, "second round")
    assert backoff == [True, False]  # the listener heard the wait start and end


async def test_a_failure_that_is_not_retryable_is_answered_without_failover():
    b1 = ScriptedAdapter("b1", always(GatewayError(400, "bad prompt", param="messages")))
    b2 = ScriptedAdapter("b2", lambda r: answer())
    with pytest.raises(GatewayError) as info:
        await two_models(b1, b2).open("m", [chat()])
    assert info.value.status == 400 and not b2.requests


async def test_never_failover_after_the_first_event():
    b1 = ScriptedAdapter("b1", always(TextDelta(0, "partial"), unavailable()))
    b2 = ScriptedAdapter("b2", lambda r: answer())
    dispatcher = two_models(b1, b2)
    dispatched = await dispatcher.open("m", [chat()])
    events = await read(dispatched)
    assert dispatched.backends == ("b1",) and not b2.requests
    assert events[0] == TextDelta(0, "partial")
    # mid-stream, every failure is the backend's: 502 upstream_error, whatever the adapter said
    assert isinstance(events[1], ErrorEvent) and len(events) == 2
    assert (events[1].error.status, events[1].error.code) == (502, "upstream_error")
    assert dispatcher.backends.backends["b1"].inflight == 0


async def test_a_stream_that_ends_before_any_event_never_started():
    b1 = ScriptedAdapter("b1", always())
    with pytest.raises(GatewayError) as info:
        await Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1})).open("m", [chat()])
    assert info.value.status == 502 and info.value.code == "upstream_error"


async def test_an_unknown_model_is_404():
    b1 = ScriptedAdapter("b1", lambda r: answer())
    with pytest.raises(GatewayError) as info:
        await Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1})).open("nope", [chat()])
    assert (info.value.status, info.value.code) == (404, "model_not_found")


# ---- n > 1 and batched prompts ------------------------------------------------------------


def one_choice_per_request(prompt_tokens: int = 10):
    """A runtime without n: each request answers one choice, with its id as the text."""
    return lambda r: [TextDelta(0, r.request_id), Finish(0, "length"), Usage(prompt_tokens, 3)]


async def test_fan_out_for_a_runtime_without_n_gives_dense_indices_and_one_usage():
    b1 = ScriptedAdapter("b1", one_choice_per_request(), n=False)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    dispatched = await dispatcher.open("m", [chat(n=3, seed=7)])
    events = await read(dispatched)
    texts = {e.index: e.text for e in events if isinstance(e, TextDelta)}
    assert texts == {0: "req-0", 1: "req-1", 2: "req-2"}
    assert sorted(e.index for e in events if isinstance(e, Finish)) == [0, 1, 2]
    # one usage, last: the prompt was read once per sub-request but is one prompt
    assert [e for e in events if isinstance(e, Usage)] == [Usage(10, 9)] and events[-1] == Usage(10, 9)
    assert [(r.sampling.n, r.sampling.seed) for r in b1.requests] == [(1, 7), (1, 8), (1, 9)]
    assert dispatcher.backends.backends["b1"].inflight == 0 and b1.ended == 3


async def test_batched_prompts_are_merged_with_dense_indices_and_summed_prompts():
    def two_choices(request):
        tokens = {"req-0": 4, "req-1": 6}[request.request_id]
        return [
            TextDelta(1, request.prompt + "/1"),
            TextDelta(0, request.prompt + "/0"),
            Finish(0, "stop"),
            Finish(1, "stop"),
            Usage(tokens, 2, cached_tokens=tokens // 2),
        ]

    b1 = ScriptedAdapter("b1", two_choices)
    dispatched = await Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1})).open(
        "m", completion(["a", "b"], n=2)
    )
    events = await read(dispatched)
    texts = {e.index: e.text for e in events if isinstance(e, TextDelta)}
    assert texts == {0: "a/0", 1: "a/1", 2: "b/0", 3: "b/1"}
    # prompts differ: each one counted
    assert events[-1] == Usage(10, 4, cached_tokens=5)


async def test_merge_counts_one_prompt_once_and_ends_at_the_first_error():
    async def sub(events):
        for e in events:
            yield e

    merged = merge(
        [
            (0, sub([TextDelta(0, "a"), Finish(0, "stop"), Usage(7, 1, cached_tokens=3)])),
            (1, sub([TextDelta(0, "b"), Finish(0, "stop"), Usage(7, 2, cached_tokens=3)])),
        ],
        prompt_counted_once=True,
    )
    events = await drain(merged)
    assert events[-1] == Usage(7, 3, cached_tokens=3)
    err = ErrorEvent(GatewayError(502, "cut"))
    merged = merge([(0, sub([err, TextDelta(0, "never")]))], prompt_counted_once=True)
    assert await drain(merged) == [err]


async def test_merge_raises_what_a_sub_stream_raised():
    async def broken():
        yield TextDelta(0, "a")
        raise GatewayError(502, "cut")

    with pytest.raises(GatewayError):
        await drain(merge([(0, broken())], prompt_counted_once=True))


# ---- a failed start leaves nothing open ----------------------------------------------------


async def test_a_failed_fan_out_closes_the_sub_streams_already_started():
    def third_fails(request):
        if request.request_id.endswith("-2"):
            return [GatewayError(400, "no")]
        return [TextDelta(0, "x"), Finish(0, "stop")]

    b1 = ScriptedAdapter("b1", third_fails, n=False)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    with pytest.raises(GatewayError):
        await dispatcher.open("m", [chat(n=3)])
    assert len(b1.requests) == 3 and b1.ended == 3
    assert dispatcher.backends.backends["b1"].inflight == 0


async def test_a_failed_second_prompt_closes_the_first_prompts_stream():
    def second_fails(request):
        return [GatewayError(400, "no")] if request.request_id == "req-1" else [TextDelta(0, "x"), Finish(0, "stop")]

    b1 = ScriptedAdapter("b1", second_fails)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    with pytest.raises(GatewayError):
        await dispatcher.open("m", completion(["a", "b"]))
    assert b1.ended == 2 and dispatcher.backends.backends["b1"].inflight == 0


async def test_the_in_flight_count_is_held_while_the_stream_is_open():
    b1 = ScriptedAdapter("b1", lambda r: answer())
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    dispatched = await dispatcher.open("m", [chat()])
    backend = dispatcher.backends.backends["b1"]
    assert backend.inflight == 1
    await anext(dispatched.events)
    await dispatched.aclose()
    assert backend.inflight == 0 and b1.ended == 1


async def test_the_stream_comes_back_guarded():
    # One example of the stream rules on the way out (the rest: test_stream_guard.py).
    b1 = ScriptedAdapter("b1", always(Usage(3, 1), TextDelta(0, "a"), Finish(0, "abort")))
    dispatched = await Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1})).open("m", [chat()])
    events = await read(dispatched)
    assert events[0] == TextDelta(0, "a") and isinstance(events[1], ErrorEvent) and len(events) == 2


@pytest.mark.parametrize("n", [1, 3])
async def test_closing_before_the_first_read_frees_everything(n):
    # A client can leave between the dispatch and the first read of the stream.
    b1 = ScriptedAdapter("b1", one_choice_per_request(), n=False)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    dispatched = await dispatcher.open("m", [chat(n=n)])
    assert dispatcher.backends.backends["b1"].inflight == n
    await dispatched.aclose()
    assert dispatcher.backends.backends["b1"].inflight == 0 and b1.ended == n


# ---- sub-requests start together and are read ahead ---------------------------------------


async def test_a_fan_out_starts_every_sub_request_at_once():
    # Each sub-request answers only once all three are under way: a serial start
    # (each after the previous one's first event) would never get past the first.
    barrier = asyncio.Barrier(3)
    b1 = ScriptedAdapter("b1", lambda r: [barrier.wait, *answer(r.request_id)], n=False)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    dispatched = await asyncio.wait_for(dispatcher.open("m", [chat(n=3)]), 5)
    events = await read(dispatched)
    assert sorted(e.index for e in events if isinstance(e, Finish)) == [0, 1, 2]
    assert b1.max_active == 3 and dispatcher.backends.backends["b1"].inflight == 0


async def test_the_prompts_of_a_batch_start_at_once_too():
    barrier = asyncio.Barrier(4)
    b1 = ScriptedAdapter("b1", lambda r: [barrier.wait, *answer(r.prompt)], n=False)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    dispatched = await asyncio.wait_for(dispatcher.open("m", completion(["a", "b"], n=2)), 5)
    texts = {e.index: e.text for e in await read(dispatched) if isinstance(e, TextDelta)}
    assert texts == {0: "a", 1: "a", 2: "b", 3: "b"} and b1.max_active == 4


async def test_a_started_sub_stream_is_read_to_its_end_while_a_sibling_still_starts():
    # The second sub-request starts only once the first one's upstream stream has
    # ended: it does, because started streams are read ahead (their connections
    # go back to the pool), not only once every sibling has started.
    b1 = ScriptedAdapter("b1", lambda r: [], n=False)

    async def first_one_ended():
        while b1.ended < 1:
            await asyncio.sleep(0.001)

    b1.script = lambda r: answer("first") if r.request_id.endswith("-0") else [first_one_ended, *answer("second")]
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    dispatched = await asyncio.wait_for(dispatcher.open("m", [chat(n=2)]), 5)
    texts = {e.index: e.text for e in await read(dispatched) if isinstance(e, TextDelta)}
    assert texts == {0: "first", 1: "second"}


async def test_a_failed_sub_request_cancels_the_others_and_frees_every_slot():
    def script(request):
        i = request.request_id.rsplit("-", 1)[1]
        return {"0": [HANG], "1": answer(), "2": [GatewayError(400, "no")]}[i]

    b1 = ScriptedAdapter("b1", script, n=False)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    with pytest.raises(GatewayError) as info:
        await asyncio.wait_for(dispatcher.open("m", [chat(n=3)]), 5)
    assert info.value.status == 400
    assert b1.ended == 3 and b1.active == 0 and dispatcher.backends.backends["b1"].inflight == 0


async def test_a_client_leaving_during_a_fan_out_start_frees_every_slot():
    b1 = ScriptedAdapter("b1", lambda r: [HANG] if r.request_id.endswith("-2") else answer(), n=False)
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    task = asyncio.create_task(dispatcher.open("m", [chat(n=3)]))
    while len(b1.requests) < 3:
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert b1.ended == 3 and dispatcher.backends.backends["b1"].inflight == 0


async def test_a_sub_group_that_fails_over_leaves_nothing_of_its_first_try_in_the_stream():
    # On b1 the first choice speaks, the second is refused (retryable): the request
    # fails over to b2 and the client sees b2's choices only.
    def on_b1(request):
        return answer("stale") if request.request_id.endswith("-0") else [unavailable()]

    b1 = ScriptedAdapter("b1", on_b1, n=False)
    b2 = ScriptedAdapter("b2", lambda r: answer("fresh"), n=False)
    dispatcher = two_models(b1, b2)
    dispatched = await dispatcher.open("m", [chat(n=2)])
    events = await read(dispatched)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["fresh", "fresh"]
    assert [b.inflight for b in dispatcher.backends.backends.values()] == [0, 0]


# ---- in-flight units, the leak of a failed batch ----------------------------------------


async def test_native_n_holds_one_in_flight_unit_per_choice():
    b1 = ScriptedAdapter("b1", lambda r: [TextDelta(0, "a"), HANG])
    dispatcher = Dispatcher(backend_set({"m": {"backends": ["b1"]}}, {"b1": b1}))
    dispatched = await dispatcher.open("m", [chat(n=3)])
    assert dispatcher.backends.backends["b1"].inflight == 3
    await dispatched.aclose()
    assert dispatcher.backends.backends["b1"].inflight == 0


async def test_a_batch_with_a_refused_prompt_leaves_no_in_flight_count_behind():
    # Issue 12 defect 6: {"prompt": ["hello", <refused>]}, repeated. The first
    # prompt is mid-stream when the second is refused.
    def script(request):
        if request.prompt == "refused":
            return [GatewayError(400, "too long", param="prompt", code="context_length_exceeded")]
        return [TextDelta(0, "he"), HANG]

    b1 = ScriptedAdapter("b1", script)
    backends = backend_set({"m": {"backends": ["b1"]}}, {"b1": b1})
    backends.backends["b1"].config.max_inflight = 2
    dispatcher = Dispatcher(backends)
    for _ in range(20):
        with pytest.raises(GatewayError) as info:
            await dispatcher.open("m", completion(["hello", "refused"]))
        assert info.value.code == "context_length_exceeded"
    pool = backends.pools["m"]
    assert backends.backends["b1"].inflight == 0 and b1.active == 0
    assert pool.capacity() == 2 and not pool.route(chat()).candidates[0].saturated


# ---- ids, retries, timeouts, counting ---------------------------------------------------


async def test_each_retry_goes_upstream_under_an_id_of_its_own():
    seen = []

    def flaky(request):
        seen.append(request.request_id)
        return [unavailable()] if len(seen) < 3 else answer()

    b1 = ScriptedAdapter("b1", flaky)
    dispatcher = Dispatcher(
        backend_set({"m": {"backends": ["b1"], "max_retries": 2, "retry_backoff_s": 0.001}}, {"b1": b1})
    )
    await read(await dispatcher.open("m", [chat(request_id="abc")]))
    assert seen == ["abc", "abc.1", "abc.2"]


async def test_a_backend_that_timed_out_is_not_tried_again_in_a_later_round():
    timeout = GatewayError(504, "slow", code="upstream_timeout", failure=FailureKind.TIMEOUT)
    b1 = ScriptedAdapter("b1", always(timeout))
    failures = []
    dispatcher = Dispatcher(
        backend_set({"m": {"backends": ["b1"], "max_retries": 3, "retry_backoff_s": 0.001}}, {"b1": b1}),
        on_failure=lambda backend, err: failures.append((backend, err.code)),
    )
    with pytest.raises(GatewayError) as info:
        await dispatcher.open("m", [chat()])
    assert info.value.status == 504 and len(b1.requests) == 1
    assert failures == [("b1", "upstream_timeout")]


async def test_every_failure_before_the_first_event_is_told_to_the_listener():
    b1 = ScriptedAdapter("b1", always(unavailable()))
    b2 = ScriptedAdapter("b2", always(GatewayError(400, "bad", code="invalid_value")))
    failures = []
    dispatcher = Dispatcher(
        backend_set({"m": {"backends": ["b1", "b2"], "max_retries": 0}}, {"b1": b1, "b2": b2}),
        on_failure=lambda backend, err: failures.append((backend, err.code)),
    )
    with pytest.raises(GatewayError):
        await dispatcher.open("m", [chat()])
    assert sorted(failures) == [("b1", "backend_unavailable"), ("b2", "invalid_value")]


@pytest.mark.parametrize(
    "prompts, n, param",
    [(["p"] * 129, 1, "prompt"), (["p"] * 2, 65, "n"), (["p"], 129, "n")],
)
def test_more_choices_than_the_cap_is_a_400_naming_the_parameter(prompts, n, param):
    with pytest.raises(GatewayError) as info:
        check_choices(completion(prompts, n=n), 128)
    assert (info.value.status, info.value.param, info.value.code) == (400, param, "too_many_choices")
    assert "128" in info.value.message
    check_choices(completion(["p"] * 2, n=64), 128)  # at the cap: fine
