"""Failover before the first byte, with backends that are healthy at start: one
that dies after readiness, one that answers 500 to every request while its
health probe stays fine, runtimes that answer 503 or 429; a 400 is not retried;
a single backend gets `max_retries + 1` attempts; a fallback model serves when a
model's backends are all gone. vLLM simulators fail on command
(simulators/faults.py), the gateway and the official client are real."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from processes import free_port
from tests.procs import SWITCHYARD, Process, start_gateway

MSG = [{"role": "user", "content": "hi"}]


def start_vllm(tmp, name: str, *flags: str) -> Process:
    port = free_port()
    p = Process(
        [*SWITCHYARD, "simulate", "vllm", "--port", str(port), "--model-name", "sim-model", "--ttft-ms", "1", *flags],
        f"http://127.0.0.1:{port}",
        tmp / f"sim-{name}-{port}.log",
    )
    return p.wait_ready("/health")


def stats(sim: Process) -> dict:
    return httpx.get(sim.url + "/_sim/stats").json()


def vllm(name: str, sim: Process) -> dict:
    return {"name": name, "adapter": "vllm", "url": sim.url, "served_model": "sim-model"}


@pytest.fixture(scope="module")
def sims(module_tmp):
    started = {}
    try:
        started["good"] = start_vllm(module_tmp, "good")
        started["doomed"] = start_vllm(module_tmp, "doomed")
        started["bad500"] = start_vllm(module_tmp, "bad500", "--fault", "status=500")
        started["busy503"] = start_vllm(module_tmp, "busy503", "--fault", "overloaded")
        started["limit429"] = start_vllm(module_tmp, "limit429", "--fault", "status=429")
        yield started
    finally:
        for p in started.values():
            p.stop()


@pytest.fixture(scope="module")
def failover_gateway(module_tmp, sims, upstream):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    good = sims["good"]
    rr = {"routing": "round_robin", "max_retries": 0}
    config = {
        "models": {
            "m": {
                "backends": [{"name": "live", "adapter": "openai", "url": upstream.url + "/v1", "served_model": "m"}]
            },
            "dies": {**rr, "backends": [vllm("doomed", sims["doomed"]), vllm("good-dies", good)]},
            "flaky": {
                **rr,
                "backends": [vllm("bad500", sims["bad500"]), vllm("good-flaky", good)],
                "ejection": {"consecutive_failures": 3, "base_ejection_s": 2},
            },
            "busy": {**rr, "backends": [vllm("busy503", sims["busy503"]), vllm("good-busy", good)]},
            "limited": {**rr, "backends": [vllm("limit429", sims["limit429"]), vllm("good-limited", good)]},
            "single": {"max_retries": 2, "retry_backoff_s": 0.2, "backends": [vllm("alone", good)]},
            "only-dead": {
                "fallback": ["m"],
                "max_retries": 0,
                "backends": [{"name": "dead2", "adapter": "openai", "url": dead}],
            },
            "all-dead": {"max_retries": 1, "backends": [{"name": "dead3", "adapter": "openai", "url": dead}]},
            "slow-retry": {
                "max_retries": 2,
                "retry_backoff_s": 5,
                "backends": [{"name": "dead4", "adapter": "openai", "url": dead}],
            },
        }
    }
    p = start_gateway(module_tmp, config)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(failover_gateway):
    with openai.OpenAI(base_url=failover_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def metric(gw: Process, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in httpx.get(gw.url + "/metrics").text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def backend_entry(gw: Process, model: str, backend: str) -> dict:
    body = httpx.get(gw.url + "/readyz", params={"model": model}).json()
    return next(b for b in body["backends"] if b["backend"] == backend)


def ask(client: openai.OpenAI, model: str, content: str = "hi", stream: bool = False) -> str:
    messages = [{"role": "user", "content": content}]
    if stream:
        chunks = client.chat.completions.create(model=model, messages=messages, max_tokens=3, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return client.chat.completions.create(model=model, messages=messages, max_tokens=3).choices[0].message.content


# ---- healthy at start, then failing ---------------------------------------------------------


def test_a_backend_that_dies_after_readiness_is_never_seen_by_a_client(failover_gateway, sims, client):
    assert backend_entry(failover_gateway, "dies", "doomed")["healthy"] is True
    assert ask(client, "dies")  # both backends answer while alive
    sims["doomed"].kill()
    # The health probe (every 5 s) has not seen the death yet: the failover loop is
    # what keeps the clients from it. Round robin sends every second request there; a
    # burst at once makes it reach the dead backend within milliseconds of the kill.
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: ask(client, "dies", stream=i % 2 == 0), range(6)))
    answers += [ask(client, "dies", stream=i % 2 == 0) for i in range(4)]
    assert all(answers)
    assert metric(failover_gateway, "switchyard_backend_failures_total", backend="doomed") >= 1


def test_a_backend_answering_500_with_a_fine_probe_is_ejected_then_only_probed(failover_gateway, sims, client):
    bad = sims["bad500"]
    assert backend_entry(failover_gateway, "flaky", "bad500")["healthy"] is True
    answers = [ask(client, "flaky", stream=i % 3 == 0) for i in range(60)]
    assert all(answers)  # no client saw an error
    probes_failed = metric(
        failover_gateway, "switchyard_backend_ejections_total", backend="bad500", reason="probe_failed"
    )
    assert (
        metric(failover_gateway, "switchyard_backend_ejections_total", backend="bad500", reason="consecutive_failures")
        == 1
    )
    # Three failures in a row ejected it; every request it got after that was a half-open probe.
    assert stats(bad)["statuses"].get("500") == 3 + probes_failed
    entry = backend_entry(failover_gateway, "flaky", "bad500")
    assert entry["healthy"] is True and entry["circuit"] in ("open", "half_open")
    assert metric(failover_gateway, "switchyard_backend_ejected", model="flaky", backend="bad500") == 1

    # Wait (on state, not a clock) for the backoff to end: then exactly one request reaches it.
    while backend_entry(failover_gateway, "flaky", "bad500")["circuit"] != "half_open":
        time.sleep(0.1)
    before = stats(bad)["statuses"]["500"]
    assert all(ask(client, "flaky") for _ in range(10))
    assert stats(bad)["statuses"]["500"] == before + 1
    entry = backend_entry(failover_gateway, "flaky", "bad500")
    assert entry["circuit"] == "open" and entry["reason"] == "probe_failed" and entry["ejected_for_s"] > 2


@pytest.mark.parametrize("model, sim, status", [("busy", "busy503", "503"), ("limited", "limit429", "429")])
def test_an_overload_answer_before_the_first_byte_fails_over(failover_gateway, sims, client, model, sim, status):
    before = stats(sims[sim])["statuses"].get(status, 0)
    assert all(ask(client, model, stream=i % 2 == 0) for i in range(4))
    assert stats(sims[sim])["statuses"].get(status, 0) - before == 2  # round robin tried it every second time


def test_a_client_mistake_is_not_retried(failover_gateway, sims, client):
    good = sims["good"]
    before = stats(good)["requests_total"]
    with pytest.raises(openai.BadRequestError):
        ask(client, "single", "[[sim:status=400]] hi")
    assert stats(good)["requests_total"] - before == 1  # one attempt, although max_retries is 2


def test_a_single_backend_gets_max_retries_plus_one_attempts_with_a_doubling_backoff(failover_gateway, sims, client):
    good = sims["good"]
    before = stats(good)["requests_total"]
    with pytest.raises(openai.InternalServerError) as info:
        ask(client, "single", "[[sim:status=503]] hi")
    assert info.value.status_code == 503
    assert stats(good)["requests_total"] - before == 3  # max_retries 2 -> 3 attempts
    at = [r["at"] for r in stats(good)["last_requests"][-3:]]
    gaps = [b - a for a, b in zip(at, at[1:])]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps  # 0.2 s, then doubled (lower bounds: load only adds)


# ---- nothing left of a model's own backends ------------------------------------------------------


def test_fallback_model_serves_and_keeps_requested_name(failover_gateway):
    r = httpx.post(
        failover_gateway.url + "/v1/chat/completions",
        json={"model": "only-dead", "messages": MSG, "max_tokens": 2, "stream": True},
    )
    assert r.status_code == 200
    assert '"model":"only-dead"' in r.text and r.text.rstrip().endswith("data: [DONE]")


def test_all_dead_is_503_with_error_envelope(failover_gateway):
    r = httpx.post(failover_gateway.url + "/v1/chat/completions", json={"model": "all-dead", "messages": MSG})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "backend_unavailable"


def test_readyz_reports_unhealthy_model_and_the_process_stays_ready(failover_gateway):
    r = httpx.get(failover_gateway.url + "/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    assert r.json()["models"]["all-dead"]["ready"] is False and r.json()["models"]["m"]["ready"] is True
    dead = httpx.get(failover_gateway.url + "/readyz", params={"model": "all-dead"})
    assert dead.status_code == 503
    assert dead.json()["status"] == "not_ready"
    assert httpx.get(failover_gateway.url + "/readyz", params={"model": "m"}).status_code == 200


def test_client_leaving_during_retry_backoff_is_counted_in_that_phase(failover_gateway):
    def cancelled() -> float:
        return metric(failover_gateway, "switchyard_client_cancellations_total", phase="retry_backoff")

    before = cancelled()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            failover_gateway.url + "/v1/chat/completions", json={"model": "slow-retry", "messages": MSG}, timeout=0.5
        )
    for _ in range(60):
        if cancelled() == before + 1:
            break
        time.sleep(0.05)
    assert cancelled() == before + 1
