"""gateway/backends/backend.py: a backend's live state and what routing reads of it.
Every field of the view comes from the config, the live counters, the adapter or the
arguments (the pool's knowledge of this request here), and a backend starts healthy
with nothing in flight."""

from __future__ import annotations

from types import SimpleNamespace

from adapters.base import Capabilities, Health, LoadSnapshot
from gateway.backends.backend import Backend
from gateway.config.schema import BackendConfig
from policies.views import BackendView


def backend() -> Backend:
    cfg = BackendConfig(
        name="b1", adapter="sglang", url="http://127.0.0.1:1", weight=2.5, max_inflight=7, track="candidate"
    )
    adapter = SimpleNamespace(capabilities=Capabilities(tools=False))
    return Backend(cfg, adapter)  # type: ignore[arg-type]


def test_a_new_backend_is_healthy_not_checked_yet_and_idle() -> None:
    b = backend()
    assert (b.inflight, b.backlog, b.load, b.name) == (0, 0, None, "b1")
    assert b.health.ok and b.health.detail == "not checked yet"


def test_the_view_is_the_config_the_live_state_and_the_arguments() -> None:
    b = backend()
    b.inflight, b.backlog, b.health = 3, 40, Health(False, "down")
    b.load = LoadSnapshot(waiting=1, running=2)
    view = b.view(ejected=True, prefix_approx=0.5, prefix_precise=0.25, session_owner=True, prefill_tokens=9)
    assert view == BackendView(
        name="b1",
        weight=2.5,
        inflight=3,
        max_inflight=7,
        healthy=False,
        load=b.load,
        capabilities=Capabilities(tools=False),
        adapter="sglang",
        ejected=True,
        track="candidate",
        prefix_approx=0.5,
        prefix_precise=0.25,
        session_owner=True,
        backlog_tokens=40,
        prefill_tokens=9,
    )


def test_the_view_s_defaults_know_nothing_of_the_request() -> None:
    view = backend().view()
    assert (view.ejected, view.prefix_approx, view.prefix_precise, view.session_owner, view.prefill_tokens) == (
        False,
        None,
        None,
        False,
        None,
    )
    assert view.healthy and view.saturated is False
