"""adapters/llamacpp_load.py (and the shared reader it uses, adapters/dialect.py
`shared_load`) without a network: `/props`, `/slots` and `/metrics` as a
llama.cpp server answers them, through a scripted reader (the `Reader` protocol)."""

from __future__ import annotations

import asyncio
import itertools
import time

import aiohttp
import orjson
import pytest

from adapters.llamacpp_load import Props, parse_props, parse_slots, read_props
from adapters.llamacpp_load import load as shared_load

_urls = itertools.count()


class Scripted:
    """A Reader whose GETs answer from `routes` (status, bytes) or raise an exception."""

    def __init__(self, routes: dict) -> None:
        self.base_url = f"http://llamacpp-{next(_urls)}"
        self.routes = routes
        self.gets: list[str] = []

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        self.gets.append(path)
        route = self.routes[path]
        if isinstance(route, BaseException):
            raise route
        status, body = route
        return status, body if isinstance(body, bytes) else orjson.dumps(body)


PROPS = {
    "default_generation_settings": {"n_ctx": 4096},
    "total_slots": 4,
    "build_info": "b1234",
    "chat_template_caps": {"supports_tools": True},
    "chat_template": "{% for m in messages %}<tool_call>{% endfor %}",
}


def test_props_are_read_from_the_fields_the_gateway_needs():
    props = parse_props(PROPS)
    assert props == Props(n_ctx=4096, slots=4, build="b1234", tools=True, hermes_calls=True)
    assert props.describe() == "build b1234: 4 slots of 4096 positions; its chat template renders tools"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({}, Props(n_ctx=0, slots=0, build="unknown", tools=False, hermes_calls=False)),
        (
            {"default_generation_settings": {"n_ctx": "4096"}, "total_slots": None, "build_info": ""},
            Props(n_ctx=0, slots=0, build="unknown", tools=False),
        ),
        (
            {"default_generation_settings": [], "chat_template_caps": {"supports_tools": False}},
            Props(0, 0, "unknown", False),
        ),
        ({"chat_template_caps": ["supports_tools"], "chat_template": None}, Props(0, 0, "unknown", False)),
        ({"chat_template": "plain {{ messages }}"}, Props(0, 0, "unknown", False, hermes_calls=False)),
    ],
)
def test_props_missing_or_odd_fields_have_neutral_values(payload, expected):
    assert parse_props(payload) == expected


def test_props_describe_a_template_without_tools():
    assert Props(n_ctx=8, slots=1, build="b", tools=False).describe() == (
        "build b: 1 slots of 8 positions; its chat template has no tools"
    )


@pytest.mark.parametrize("payload", [None, [], "props"])
def test_props_that_are_not_an_object_are_none(payload):
    assert parse_props(payload) is None


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ((200, PROPS), parse_props(PROPS)),
        ((404, PROPS), None),
        ((200, b"not json"), None),
        (TimeoutError(), None),
        (aiohttp.ClientConnectionError(), None),
        (ConnectionRefusedError(), None),
    ],
)
async def test_read_props(route, expected):
    reader = Scripted({"/props": route})
    assert await read_props(reader) == expected
    assert reader.gets == ["/props"]


def slot(processing: bool, n_ctx=1000, prompt=100, next_token=None) -> dict:
    s = {"n_ctx": n_ctx, "is_processing": processing, "n_prompt_tokens": prompt}
    if next_token is not None:
        s["next_token"] = next_token
    return s


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (None, (None, None)),
        ({"slots": []}, (None, None)),
        ([], (0, None)),
        ([slot(False), slot(False)], (0, 0.0)),
        # a busy slot holds its prompt and what it decoded (next_token a list or an object)
        ([slot(True, next_token=[{"n_decoded": 50}]), slot(False)], (1, 0.075)),
        ([slot(True, next_token={"n_decoded": 50}), slot(True, prompt=250)], (2, 0.2)),
        # odd fields count as nothing, never as an error
        ([slot(True, n_ctx="1000", prompt="x", next_token=[]), slot(False), "junk"], (1, 0.0)),
        ([slot(True, next_token=[{"n_decoded": "5"}]), slot(False)], (1, 0.05)),
        # never above 1
        ([slot(True, n_ctx=100, prompt=300)], (1, 1.0)),
        ([slot(True, n_ctx=0, prompt=3)], (1, None)),
    ],
)
def test_slots_give_busy_slots_and_kv_in_use(payload, expected):
    assert parse_slots(payload) == expected


METRICS = (
    "# HELP llamacpp:requests_processing x\n"
    "llamacpp:requests_processing 3\n"
    "llamacpp:requests_deferred 2\n"
    "llamacpp:prompt_tokens_total {processed}\n"
    "llamacpp:prompt_tokens_cached_total {cached}\n"
)


def metrics(processed: float, cached: float) -> tuple[int, bytes]:
    return 200, METRICS.format(processed=processed, cached=cached).encode()


async def test_load_from_metrics_and_slots():
    reader = Scripted({"/metrics": metrics(300, 100), "/slots": (200, [slot(True, next_token=[{"n_decoded": 100}])])})
    before = time.time()
    load = await shared_load(reader, 0.0)
    assert (load.running, load.waiting, load.kv_usage) == (3, 2, 0.2)
    assert load.prefix_hit_rate == 0.25  # since start: 100 cached of 400
    assert load.read_at is not None and load.read_at >= before
    # since the previous read: 300 new cached, 100 new processed
    reader.routes["/metrics"] = metrics(400, 400)
    assert (await shared_load(reader, 0.0)).prefix_hit_rate == 0.75


@pytest.mark.parametrize(
    ("counts", "rate"),
    [
        # nothing new since the previous read: since start
        ((300, 100), 0.25),
        # counters went back (a restart): since start
        ((200, 150), 150 / 350),
        ((350, 50), 50 / 400),
    ],
)
async def test_hit_rate_falls_back_to_since_start(counts, rate):
    reader = Scripted({"/metrics": metrics(300, 100), "/slots": (404, b"")})
    await shared_load(reader, 0.0)
    reader.routes["/metrics"] = metrics(*counts)
    assert (await shared_load(reader, 0.0)).prefix_hit_rate == pytest.approx(rate)


@pytest.mark.parametrize(
    "text",
    [
        "llamacpp:requests_processing 1\nllamacpp:prompt_tokens_total 5\n",
        "llamacpp:requests_processing 1\nllamacpp:prompt_tokens_cached_total 5\n",
        "llamacpp:requests_processing 1\nllamacpp:prompt_tokens_total 0\nllamacpp:prompt_tokens_cached_total 0\n",
    ],
)
async def test_no_hit_rate_without_both_counters_or_any_prompt(text):
    reader = Scripted({"/metrics": (200, text.encode()), "/slots": (404, b"")})
    load = await shared_load(reader, 0.0)
    assert load.prefix_hit_rate is None and load.running == 1 and load.kv_usage is None


async def test_without_metrics_the_busy_slots_are_the_running_and_no_queue_is_known():
    reader = Scripted({"/metrics": (501, b"metrics disabled"), "/slots": (200, [slot(True), slot(False)])})
    before = time.time()
    load = await shared_load(reader, 0.0)
    assert (load.running, load.waiting, load.kv_usage, load.prefix_hit_rate) == (1, None, 0.05, None)
    assert load.read_at >= before


@pytest.mark.parametrize("slots", [(200, b"[not json"), TimeoutError(), OSError(), (503, b"")])
async def test_slots_unreadable_leave_kv_unknown(slots):
    reader = Scripted({"/metrics": metrics(1, 1), "/slots": slots})
    load = await shared_load(reader, 0.0)
    assert load.running == 3 and load.kv_usage is None


async def test_unreachable_server_is_an_empty_snapshot_read_now():
    reader = Scripted({"/metrics": OSError(), "/slots": OSError()})
    before = time.time()
    load = await shared_load(reader, 0.0)
    assert (load.running, load.waiting, load.kv_usage) == (None, None, None)
    assert load.read_at >= before


async def test_one_read_per_interval_for_every_caller():
    reader = Scripted({"/metrics": metrics(300, 100), "/slots": (200, [])})
    first, second = await asyncio.gather(shared_load(reader, 60.0), shared_load(reader, 60.0))
    assert first is second and reader.gets == ["/metrics", "/slots"]
    # another server is read on its own
    other = Scripted({"/metrics": metrics(1, 1), "/slots": (200, [])})
    await shared_load(other, 60.0)
    assert other.gets == ["/metrics", "/slots"]
    # past the interval: read again
    assert (await shared_load(reader, 0.0)) is not first and reader.gets.count("/metrics") == 2


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        # an odd entry or an idle slot first: the slots after it still count
        (["junk", slot(True)], (1, 0.1)),
        ([slot(False), slot(True)], (1, 0.05)),
        # a slot without a context size adds none (used 100 of 1000, not of 1001)
        ([slot(True, n_ctx="x"), slot(False)], (1, 0.1)),
    ],
)
def test_every_slot_is_looked_at(payload, expected):
    assert parse_slots(payload) == expected


async def test_slots_answered_with_an_error_status_are_not_read():
    reader = Scripted({"/metrics": metrics(1, 1), "/slots": (503, [slot(True)])})
    assert (await shared_load(reader, 0.0)).kv_usage is None


@pytest.mark.parametrize(
    ("first", "then", "rate"),
    [
        # (processed, cached) since the previous read
        ((300, 100), (400, 100), 0.0),  # only processed grew
        ((300, 100), (300, 150), 1.0),  # only cached grew
        ((300, 100), (400, 200), 0.5),  # cached now below the previous processed count
        ((300, 100), (300, 101), 1.0),  # one token seen: enough
    ],
)
async def test_hit_rate_since_the_previous_read_at_its_boundaries(first, then, rate):
    reader = Scripted({"/metrics": metrics(*first), "/slots": (404, b"")})
    await shared_load(reader, 0.0)
    reader.routes["/metrics"] = metrics(*then)
    assert (await shared_load(reader, 0.0)).prefix_hit_rate == rate


async def test_hit_rate_since_start_with_a_single_token():
    reader = Scripted({"/metrics": metrics(0, 1), "/slots": (404, b"")})
    assert (await shared_load(reader, 0.0)).prefix_hit_rate == 1.0


class Clock:
    """A `time` module whose time() moves on by one second per call."""

    def __init__(self, start: float) -> None:
        self.now = start

    def time(self) -> float:
        self.now += 1.0
        return self.now


@pytest.mark.parametrize("metrics_status", [200, 501])
async def test_the_snapshot_is_dated_when_the_metrics_were_read(monkeypatch, metrics_status):
    import adapters.prometheus_text as prom

    monkeypatch.setattr(prom, "time", Clock(1000.0))
    answer = metrics(1, 1) if metrics_status == 200 else (501, b"")
    reader = Scripted({"/metrics": answer, "/slots": (200, [])})
    assert (await shared_load(reader, 0.0)).read_at == 1001.0


async def test_the_interval_at_below_and_above_its_boundary(monkeypatch):
    import adapters.dialect as dialect  # the shared reader (dialect.shared_load) keeps the interval

    reader = Scripted({"/metrics": metrics(1, 1), "/slots": (200, [])})
    first = await shared_load(reader, 0.0)
    clock = Clock(first.read_at + 9.0)  # its next time() is read_at + 10
    monkeypatch.setattr(dialect, "time", clock)
    interval = (first.read_at + 10.0) - first.read_at
    assert await shared_load(reader, interval + 0.5) is first  # below: the shared snapshot
    clock.now = first.read_at + 9.0
    assert await shared_load(reader, interval) is not first  # at it: read again


def test_each_event_loop_has_its_own_reader():
    reader = Scripted({"/metrics": metrics(1, 1), "/slots": (200, [])})
    loops = [asyncio.new_event_loop() for _ in range(2)]  # both alive: two distinct loops
    try:
        for loop in loops:  # the second: its own lock, its own read
            loop.run_until_complete(shared_load(reader, 60.0))
    finally:
        for loop in loops:
            loop.close()
    assert reader.gets.count("/metrics") == 2
