"""Fixtures for the harness's tests: real upstream processes on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.procs import start_upstream


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fast OpenAI-compatible upstream: 8 chunks, 1 ms apart."""
    p = start_upstream(tmp_path_factory.mktemp("upstream"), "--chunks", "8", "--itl-ms", "1")
    yield p.url
    p.stop()


@pytest.fixture(scope="module")
def slow_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Takes 1 s before its first token: the open-loop drift test's server."""
    p = start_upstream(tmp_path_factory.mktemp("slow-upstream"), "--chunks", "2", "--ttft-ms", "1000")
    yield p.url
    p.stop()
