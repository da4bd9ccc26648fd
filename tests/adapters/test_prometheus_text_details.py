"""adapters/prometheus_text.py beyond the runtimes' usual series: odd lines, escapes,
NaN in means, and the scrape and gauge load through a scripted reader (the `Reader`
protocol), without a network."""

from __future__ import annotations

import math
import time

import aiohttp
import pytest

from adapters import prometheus_text as prom


def test_label_escapes_and_spacing():
    (s,) = prom.parse('m{ a = "x\\\\y\\nz" , b="q\\"r"} 2')
    assert s.labels == {"a": "x\\y\nz", "b": 'q"r'} and s.value == 2.0
    (t,) = prom.parse('m{a="1",} 3 1700000000')
    assert (t.labels, t.value) == ({"a": "1"}, 3.0)
    (u,) = prom.parse("  m_total   4.5  ")
    assert (u.name, u.labels, u.value) == ("m_total", {}, 4.5)
    (v,) = prom.parse('m{a="}"} +Inf')
    assert v.labels == {"a": "}"} and math.isinf(v.value)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "# TYPE m gauge",
        "#m 1",
        "9bad 1",
        '{a="b"} 1',
        'm{a="unclosed 1',
        'm{a="b"}',
        "m",
        "m one",
        'm{a="b"} x',
    ],
)
def test_malformed_lines_are_skipped(line):
    assert prom.parse(line + "\nok 1\n") == [prom.Sample("ok", {}, 1.0)]


def test_a_label_set_that_stops_parsing_keeps_what_it_read():
    (s,) = prom.parse('m{a="1" junk b="2"} 7')
    assert s.labels == {"a": "1"} and s.value == 7.0


def test_totals_over_matching_labels_only():
    samples = prom.parse('m{a="1",b="x"} 1\nm{a="1",b="y"} 2\nm{a="2",b="x"} 4\nother{a="1"} 8\n')
    assert prom.total(samples, "m", a="1") == 3.0
    assert prom.total(samples, "m", a="1", b="x") == 1.0
    assert prom.total(samples, "m", a="3") is None
    assert prom.total(samples, "m") == 7.0
    assert prom.total(prom.parse("m 0\n"), "m") == 0.0  # a zero is known, not None


def test_mean_skips_nan_and_first_total_takes_the_first_name_present():
    samples = prom.parse("r NaN\nr 0.5\nr 0.25\nn NaN\nx 3\n")
    assert prom.mean(samples, "r") == 0.375
    assert prom.mean(samples, "n") is None
    assert prom.first_total(samples, "absent", "x", "r") == 3.0
    assert prom.first_total(samples, "absent", "n") is None


class Scripted:
    base_url = "http://rt"

    def __init__(self, answer) -> None:
        self.answer = answer
        self.gets: list[str] = []

    async def get(self, path: str, timeout_s: float = 5.0):
        self.gets.append(path)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


async def test_scrape_answers_and_failures():
    before = time.time()
    http = Scripted((200, b"m 1\n\xff bad utf-8 line\n"))
    samples, read_at = await prom.scrape(http, "/metrics")
    assert samples == [prom.Sample("m", {}, 1.0)] and read_at >= before and http.gets == ["/metrics"]
    samples, read_at = await prom.scrape(Scripted((501, b"no metrics")), "/metrics")
    assert samples is None and read_at >= before
    for exc in (TimeoutError(), aiohttp.ClientConnectionError(), ConnectionRefusedError()):
        assert await prom.scrape(Scripted(exc), "/metrics") == (None, None)


GAUGES = b'run{e="0"} 2\nrun{e="1"} 3\nwait 4\nkv{e="0"} 0.2\nkv{e="1"} 0.4\nhit 0.5\n'


async def test_gauge_load_sums_running_and_waiting_and_averages_ratios():
    before = time.time()
    load = await prom.gauge_load(Scripted((200, GAUGES)), "/m", "run", "wait", "kv", "hit")
    assert (load.running, load.waiting, load.prefix_hit_rate) == (5, 4, 0.5)
    assert load.kv_usage == pytest.approx(0.3) and load.read_at >= before
    unknown = await prom.gauge_load(Scripted((200, b"x 1\n")), "/m", "run", "wait", "kv", "hit")
    assert (unknown.running, unknown.waiting, unknown.kv_usage, unknown.prefix_hit_rate) == (None, None, None, None)


async def test_gauge_load_of_an_unreachable_or_refusing_endpoint():
    before = time.time()
    down = await prom.gauge_load(Scripted(OSError()), "/m", "run", "wait", "kv", "hit")
    assert (down.running, down.waiting, down.kv_usage) == (None, None, None) and down.read_at >= before
    refused = await prom.gauge_load(Scripted((404, b"")), "/m", "run", "wait", "kv", "hit")
    assert refused.running is None and refused.read_at >= before  # read, with nothing in it


def test_gauge_snapshot_keeps_the_read_time_or_stamps_now():
    samples = prom.parse("run 1.9\nwait 2.2\n")
    snap = prom.gauge_snapshot(samples, 123.0, "run", "wait", 0.1, None)
    assert (snap.running, snap.waiting, snap.kv_usage, snap.read_at) == (1, 2, 0.1, 123.0)
    before = time.time()
    assert prom.gauge_snapshot(samples, None, "run", "wait", None, None).read_at >= before


def test_label_set_edges():
    assert prom.parse("m{} 1") == [prom.Sample("m", {}, 1.0)]  # an empty label set
    assert prom.parse('m{a="b"}12') == [prom.Sample("m", {"a": "b"}, 12.0)]  # no space before the value
    assert prom.parse("m{5 6\nok 1") == [prom.Sample("ok", {}, 1.0)]  # never closed: skipped


def test_a_nan_series_does_not_stop_the_sum():
    assert prom.total(prom.parse("m NaN\nm 2\n"), "m") == 2.0


class Clock:
    """A `time` module whose time() moves on by one second per call."""

    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        self.now += 1.0
        return self.now


async def test_gauge_load_asks_its_path_and_dates_the_snapshot_when_read(monkeypatch):
    monkeypatch.setattr(prom, "time", Clock())
    http = Scripted((200, GAUGES))
    load = await prom.gauge_load(http, "/m", "run", "wait", "kv", "hit")
    assert http.gets == ["/m"] and load.read_at == 1001.0  # the scrape's time, not a later one
    refused = await prom.gauge_load(Scripted((404, b"")), "/m", "run", "wait", "kv", "hit")
    assert refused.read_at == 1002.0
