"""gateway/serving/dispatch.py's `Dispatcher.assign`: a request of a model under rollout
gets its track once, from the sink's shares now, by the model's own stickiness and
session sources; a model without a rollout, an unknown model or a gateway without a
rollout sink gets none."""

from __future__ import annotations

from typing import Any

from adapters.base import GenerationRequest
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config
from gateway.serving.dispatch import Dispatcher
from policies.rollout_assign import assign
from policies.rollout_records import TrackShares
from tests.gateway.serving.rollout_kit import Controller


class Asked(Controller):
    """The sink, noting which model's shares were asked for."""

    def __init__(self, candidate: float) -> None:
        super().__init__(candidate)
        self.asked: list[str] = []

    def shares(self, model: str) -> TrackShares:
        self.asked.append(model)
        return self.now


STABLE = {"name": "s", "adapter": "openai", "url": "http://127.0.0.1:9/v1", "track": "stable"}
CANDIDATE = {**STABLE, "name": "c", "track": "candidate"}


def dispatcher(controller: Controller | None, rollout: dict[str, Any] | None = None, **model: Any) -> Dispatcher:
    rolled = {"backends": [STABLE, CANDIDATE], "rollout": {"steps": [0.5, 1.0], **(rollout or {})}, **model}
    plain = {"backends": [{**STABLE, "name": "p", "track": "stable"}]}
    return Dispatcher(BackendSet(parse_config({"models": {"m": rolled, "plain": plain}})), rollouts=controller)


def chat(rid: str, model: str = "m", tenant: str = "t1", **keys: str) -> list[GenerationRequest]:
    return [GenerationRequest(rid, model, messages=[], tenant=tenant, session_keys=keys)]


async def test_no_rollout_no_sink_or_no_model_is_no_assignment():
    controller = Controller(candidate=1.0)
    assert dispatcher(controller).assign("plain", chat("r1", "plain")) is None
    assert dispatcher(controller).assign("gone", chat("r1", "gone")) is None
    assert dispatcher(None).assign("m", chat("r1")) is None


async def test_the_track_comes_from_the_sinks_shares_now():
    controller = Asked(candidate=1.0)
    d = dispatcher(controller)
    requests = chat("r1")
    got = d.assign("m", requests)
    assert got is not None
    assert (got.assigned, got.served, got.shares) == ("candidate", "candidate", controller.now)
    assert got.check.req is requests[0] and not got.ended.done()
    controller.now = Controller(candidate=0.0).now
    got = d.assign("m", chat("r2"))
    assert got is not None and (got.assigned, got.served) == ("stable", "stable")
    assert controller.asked == ["m", "m"]


async def test_a_session_or_a_tenant_keeps_its_track_by_the_models_own_rules():
    controller = Controller(candidate=0.5)
    by_session = dispatcher(controller, session_affinity={"sources": ["user"]})
    by_tenant = dispatcher(controller, rollout={"sticky": ["tenant"]})
    for d, sticky, key in ((by_session, {"user": "u"}, {}), (by_tenant, {}, {})):
        seen = set()
        for i in range(40):
            tracks = {d.assign("m", chat(f"r{i}-{j}", tenant=f"t{i}", **sticky, **key)).assigned for j in range(3)}  # type: ignore[union-attr]
            assert len(tracks) == 1, i  # the same session (or tenant) on one track, whatever the request id
            seen |= tracks
        assert seen == {"stable", "candidate"}  # and the sessions (tenants) spread over both
    # the draw is the model's own (its name is in the hash)
    for i in range(40):
        requests = chat(f"r{i}", tenant=f"t{i}", user="u")
        expected = assign("m", requests[0], controller.now, ["session"], ["user"])
        assert by_session.assign("m", requests).assigned == expected  # type: ignore[union-attr]
    # a key the model does not take as a session, and no tenant stickiness: a fresh draw per request
    free = dispatcher(controller, session_affinity={"sources": ["user"]})
    drawn = {free.assign("m", chat(f"r{i}", prompt_cache_key="k")).assigned for i in range(40)}  # type: ignore[union-attr]
    assert drawn == {"stable", "candidate"}
