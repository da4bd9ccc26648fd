"""A bug inside a generation (an exception that is no GatewayError) is a 500 in the
error envelope, recorded as 500: never uvicorn's plain-text 500 logged as 200."""

from __future__ import annotations

import orjson
import pytest

from adapters.base import TextDelta
from gateway.observe.recorder import RequestRecorder
from tests.gateway.scripted import ScriptedAdapter
from tests.gateway.serving.test_generation import chat, generate


class Broken(ScriptedAdapter):
    """Yields `after` text deltas, then fails the way a bug does."""

    def __init__(self, after: int) -> None:
        super().__init__("b1", lambda request: [])
        self.after = after

    async def generate(self, request):
        for _ in range(self.after):
            yield TextDelta(0, "x")
        raise RuntimeError("a bug")


@pytest.fixture
def recorded(monkeypatch) -> list[int]:
    """The status of every outcome the recorder writes down (the access log's)."""
    statuses: list[int] = []
    finish = RequestRecorder.finish

    def spy(self, ctx, outcome):
        statuses.append(outcome.status)
        finish(self, ctx, outcome)

    monkeypatch.setattr(RequestRecorder, "finish", spy)
    return statuses


@pytest.mark.parametrize("stream,after", [(True, 0), (False, 0), (False, 2)])
async def test_a_bug_before_anything_was_sent_is_a_500_envelope_recorded_as_500(recorded, stream, after):
    run = await generate(Broken(after), chat(stream=stream))
    assert run.status == 500
    assert orjson.loads(run.body)["error"]["code"] == "internal_error"
    assert recorded == [500]


async def test_a_bug_mid_stream_cuts_the_connection_and_is_recorded_as_500(recorded):
    with pytest.raises(RuntimeError, match="a bug"):
        await generate(Broken(2), chat(stream=True))
    assert recorded == [500]
