"""Hostile bodies over HTTP to a real gateway process in front of the test upstream:
every answer is a success or a JSON error envelope, never a 500 and never a hang,
and the access log's status for each request is the status the client got.

(The Responses API is fuzzed in process, tests/fuzz/test_request_handling.py, until
the gateway routes it.) `make test` runs a bounded number of examples; `make
test-slow` many more, and the wrong-type sweep over HTTP."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz.bodies import Hostile, hostile_body, wrong_type_sweep
from tests.procs import Process

ROUTES = {"CreateChatCompletionRequest": "/v1/chat/completions", "CreateCompletionRequest": "/v1/completions"}
FAST, SLOW = 150, 1500
TIMEOUT_S = 30  # a hang fails the request, and so the test
LOG_WAIT_S = 10  # for the access log's last lines, written after their answers


class Judge:
    """Sends bodies and checks each answer; then checks the access log against them all."""

    def __init__(self, gateway: Process, api: str) -> None:
        self.gateway = gateway
        self.url = gateway.url + ROUTES[api]
        self.client = httpx.Client(timeout=TIMEOUT_S)
        self.sent: dict[str, int] = {}  # request id -> the status the client got

    def __call__(self, raw: bytes, how: str) -> None:
        r = self.client.post(self.url, content=raw, headers={"content-type": "application/json"})
        assert r.status_code != 500, (how, r.text[:500])
        if r.status_code >= 400:
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}, (how, error)
        elif r.headers["content-type"].startswith("text/event-stream"):
            assert r.text.rstrip().endswith("data: [DONE]"), (how, r.text[-300:])
        else:
            assert isinstance(r.json(), dict), how
        self.sent[r.headers["x-request-id"]] = r.status_code

    def logged(self) -> dict[str, int]:
        """Request id -> the status its access log line records."""
        logged = {}
        for line in self.gateway.child.log().splitlines():
            if line.startswith('{"ts"'):
                record = json.loads(line)
                logged[record["request_id"]] = record["status"]
        return logged

    def check_access_log(self) -> None:
        # A request's line is written once its answer has gone out, so the last one can
        # trail the client's read by a scheduling slice on a busy machine: wait for each
        # id to be logged (bounded), then compare every status.
        deadline = time.monotonic() + LOG_WAIT_S
        logged = self.logged()
        while not set(self.sent) <= set(logged) and time.monotonic() < deadline:
            time.sleep(0.05)
            logged = self.logged()
        differ = {rid: (status, logged.get(rid)) for rid, status in self.sent.items() if logged.get(rid) != status}
        assert not differ, f"sent vs logged status: {differ}"

    def close(self) -> None:
        self.client.close()


def fuzz(gateway: Process, api: str, examples: int) -> None:
    judge = Judge(gateway, api)

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(hostile_body(api, "m"))
    def run(hostile: Hostile) -> None:
        judge(hostile.raw, hostile.how)

    try:
        run()
    finally:
        judge.close()
    judge.check_access_log()


@pytest.mark.parametrize("api", list(ROUTES))
def test_hostile_bodies_over_http_are_answered_and_logged_as_sent(gateway, api):
    fuzz(gateway, api, FAST)


@pytest.mark.slow
@pytest.mark.parametrize("api", list(ROUTES))
def test_many_hostile_bodies_over_http(gateway, api):
    fuzz(gateway, api, SLOW)


@pytest.mark.slow
@pytest.mark.parametrize("api", list(ROUTES))
def test_a_wrong_type_at_every_path_over_http(gateway, api):
    judge = Judge(gateway, api)
    try:
        for how, raw in wrong_type_sweep(api, "m"):
            judge(raw, how)
    finally:
        judge.close()
    judge.check_access_log()
