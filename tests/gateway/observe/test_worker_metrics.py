"""gateway/observe/worker_metrics.py over real Unix sockets in one process: each worker
answers its siblings with its own exposition, the scraped one merges them all labelled by
worker, and a sibling that is gone or silent past `SIBLING_TIMEOUT_S` is left out, logged
and counted."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gateway.lifecycle.workers import WorkerSlot
from gateway.observe import worker_metrics
from gateway.observe.worker_metrics import WorkerMetrics, merged_exposition


def slot(index: int, count: int, run_dir) -> WorkerSlot:
    return WorkerSlot(index=index, count=count, supervisor_pid=1, run_dir=str(run_dir), port=1)


def own(n: int):
    return lambda: f"# TYPE up gauge\nup {n}.0\n".encode()


def failures(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("switchyard_worker_scrape_failures_total")


def test_the_failure_counter_is_named_and_described_and_starts_at_zero(tmp_path):
    registry = CollectorRegistry()
    WorkerMetrics(slot(0, 1, tmp_path), own(0), registry)
    text = generate_latest(registry).decode()
    assert (
        "# HELP switchyard_worker_scrape_failures_total Siblings that did not answer a scrape in time "
        "(their series were left out of it).\n# TYPE switchyard_worker_scrape_failures_total counter\n"
        "switchyard_worker_scrape_failures_total 0.0\n"
    ) in text


async def test_the_scraped_worker_shows_every_siblings_series_labelled(tmp_path, caplog):
    registries = [CollectorRegistry() for _ in range(3)]
    workers = [WorkerMetrics(slot(i, 3, tmp_path), own(i), registries[i]) for i in range(3)]
    for worker in workers:
        await worker.start()
    try:
        answer = await workers[1].endpoint(None)
        assert answer.media_type == CONTENT_TYPE_LATEST
        text = answer.body.decode()
        assert [line for line in text.splitlines() if line.startswith("up")] == [
            'up{worker="0"} 0.0',
            'up{worker="1"} 1.0',
            'up{worker="2"} 2.0',
        ]
        assert failures(registries[1]) == 0 and "did not answer" not in caplog.text
    finally:
        for worker in workers:
            await worker.aclose()
    # Closed: a sibling's socket no longer answers; the scrape goes on without it.
    alone_registry = CollectorRegistry()
    alone = WorkerMetrics(slot(0, 2, tmp_path), own(7), alone_registry)
    with caplog.at_level(logging.WARNING, "switchyard.workers"):
        text = (await alone.endpoint(None)).body.decode()
    assert [line for line in text.splitlines() if line.startswith("up")] == ['up{worker="0"} 7.0']
    assert failures(alone_registry) == 1
    (record,) = [r for r in caplog.records if r.name == "switchyard.workers"]
    assert record.getMessage().startswith("worker 1 did not answer for /metrics: ")
    assert "Error" in record.getMessage()  # the reason, as repr() writes it


async def test_a_sibling_gone_or_silent_is_left_out_and_counted(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(worker_metrics, "SIBLING_TIMEOUT_S", 0.2)
    registry = CollectorRegistry()
    scraped = WorkerMetrics(slot(0, 3, tmp_path), own(0), registry)
    held: list[asyncio.StreamWriter] = []

    async def silent(reader, writer):  # accepts, never answers
        held.append(writer)

    silent_server = await asyncio.start_unix_server(silent, path=scraped.slot.metrics_socket(2))
    try:
        with caplog.at_level(logging.WARNING, "switchyard.workers"):
            text = (await asyncio.wait_for(scraped.endpoint(None), 5)).body.decode()
    finally:
        for writer in held:
            writer.close()
        silent_server.close()
        await silent_server.wait_closed()
    assert [line for line in text.splitlines() if line.startswith("up")] == ['up{worker="0"} 0.0']
    assert failures(registry) == 2
    said = sorted(r.getMessage() for r in caplog.records if r.name == "switchyard.workers")
    assert said[0].startswith("worker 1 did not answer for /metrics: FileNotFoundError")
    assert said[1] == "worker 2 did not answer for /metrics: TimeoutError()"


async def test_a_closed_worker_can_close_again_and_one_never_started_closes(tmp_path):
    never = WorkerMetrics(slot(0, 1, tmp_path), own(0), CollectorRegistry())
    await never.aclose()
    worker = WorkerMetrics(slot(0, 1, tmp_path), own(0), CollectorRegistry())
    await worker.start()
    await worker.aclose()
    with pytest.raises(OSError):
        await asyncio.open_unix_connection(worker.slot.metrics_socket(0))


def test_the_merge_keeps_each_samples_timestamp():
    text = merged_exposition({0: "# TYPE up gauge\nup 1.0 1700000000000\n"}).decode()
    assert 'up{worker="0"} 1.0 1700000000000' in text
