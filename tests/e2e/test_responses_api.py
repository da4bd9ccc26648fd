"""/v1/responses end to end: the official `openai` client (strict validation) ->
a real gateway process -> the native engine and each of the four runtime
simulators. `responses.create`, the `responses.stream` helper (text, a forced
tool call, a json_schema format), a two-turn conversation through
`previous_response_id`, the same shapes on every runtime; and the hostile side:
another tenant's id, malformed items, unsupported features, and a client that
leaves mid-stream freeing the upstream work, the in-flight gauges and its lease."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from conformance.checks.responses import UNIT_TOOL as UNIT
from policies.auth import hash_key
from simulators.testing import start_simulator
from tests.gateway.openai.responses.official import message_item_events
from tests.procs import start_gateway

# The flags that switch on each runtime's tool calling (as conformance/ci_matrix.py runs them).
SIMULATORS = {
    "vllm": {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"},
    "sglang": {"tool_call_parser": "qwen25", "health_latency": 0},
    "trtllm": {"tool_call_parser": "qwen3"},
    "tgi": {},
}
MODELS = ["native", *(f"sim-{k}" for k in SIMULATORS)]
TENANTS = {"a": {"models": ["*"]}, "b": {"models": ["sim-*"]}, "capped": {"models": ["*"], "max_concurrent": 1}}
VERDICT = {
    "type": "json_schema",
    "name": "verdict",
    "schema": {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    },
    "strict": True,
}
MAX_OUTPUT = 80


def key(tenant: str) -> str:
    return f"sk-sy-{tenant}-responses-key"


@pytest.fixture(scope="module")
def stack(module_tmp, tiny_model_dir):
    sims = {kind: start_simulator(kind, wait=False, model_name="tiny", **flags) for kind, flags in SIMULATORS.items()}
    slow = start_simulator("vllm", wait=False, model_name="tiny", itl_ms=50, output_tokens=400)
    for sim in (*sims.values(), slow):
        sim.wait_ready()

    def backend(name: str, kind: str, url: str) -> dict:
        return {"name": name, "adapter": kind, "url": url, "served_model": "tiny"}

    models = {f"sim-{k}": {"backends": [backend(f"sim-{k}", k, s.url)]} for k, s in sims.items()}
    models["native"] = {
        "backends": [
            {
                "name": "native",
                "adapter": "native",
                "model_path": str(tiny_model_dir),
                "options": {"max_model_len": 1024, "num_blocks": 512, "max_num_seqs": 8},
            }
        ]
    }
    models["slow"] = {"backends": [backend("slow", "vllm", slow.url)]}
    config = {
        "models": models,
        "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key(key(t)), "tenant": t} for t in TENANTS]},
        "tenants": TENANTS,
    }
    gateway = start_gateway(module_tmp, config, env={"OMP_NUM_THREADS": "1"})
    yield gateway, slow
    gateway.stop()
    for sim in (*sims.values(), slow):
        sim.stop()


def client(gateway, tenant: str = "a") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=key(tenant), max_retries=0, timeout=120, _strict_response_validation=True
    )


def raw(gateway, method: str, path: str, tenant: str = "a", **kw) -> httpx.Response:
    headers = {"authorization": f"Bearer {key(tenant)}"}
    return httpx.request(method, gateway.url + path, headers=headers, timeout=60, **kw)


def streamed(c: openai.OpenAI, **request) -> tuple[list[str], object]:
    """The event types of one `responses.stream` (deltas collapsed) and its final response
    (from the terminal event: the helper's `get_final_response` wants `completed`)."""
    kinds: list[str] = []
    final = None
    with c.responses.stream(**request) as stream:
        for event in stream:
            if not kinds or kinds[-1] != event.type or not event.type.endswith(".delta"):
                kinds.append(event.type)
            if event.type in ("response.completed", "response.incomplete", "response.failed"):
                final = event.response
    return kinds, final


def shape(response) -> list[tuple[str, str]]:
    return [(item.type, item.status) for item in response.output]


@pytest.fixture(scope="module")
def results(stack):
    """Every model's answers to the same requests, gathered once."""
    gateway, _ = stack
    c = client(gateway)
    out = {}
    for model in MODELS:
        base = {"model": model, "max_output_tokens": MAX_OUTPUT, "temperature": 0}
        created = c.responses.create(input="Say something.", **base)
        text = streamed(c, input="Say something.", **base)
        tool = streamed(
            c, input="Which unit?", tools=[UNIT], tool_choice={"type": "function", "name": "set_unit"}, **base
        )
        schema = streamed(c, input="Is it fine?", text={"format": VERDICT}, **base)
        out[model] = {"created": created, "text": text, "tool": tool, "schema": schema}
    return out


@pytest.mark.parametrize("model", MODELS)
def test_create_answers_a_message(results, model):
    r = results[model]["created"]
    assert r.object == "response" and r.model == model and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert [i.type for i in r.output] == ["message"] and r.output[0].content[0].type == "output_text"
    assert r.output_text
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= MAX_OUTPUT
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == MAX_OUTPUT


@pytest.mark.parametrize("model", MODELS)
def test_stream_text_events_in_order(results, model):
    kinds, final = results[model]["text"]
    terminal = "response.incomplete" if final.status == "incomplete" else "response.completed"
    # Repeated deltas are collapsed into one when collected.
    assert kinds == ["response.created", "response.in_progress", *message_item_events(), terminal]
    assert final.output_text


@pytest.mark.parametrize("model", MODELS)
def test_stream_forced_tool_call(results, model):
    kinds, final = results[model]["tool"]
    assert final.status == "completed", final
    calls = [i for i in final.output if i.type == "function_call"]
    assert calls and all(i.type == "function_call" for i in final.output)
    assert calls[0].name == "set_unit" and calls[0].call_id
    assert json.loads(calls[0].arguments)["unit"] in ("celsius", "fahrenheit")
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"


@pytest.mark.parametrize("model", MODELS)
def test_stream_json_schema(results, model):
    _, final = results[model]["schema"]
    assert final.status == "completed", final
    assert isinstance(json.loads(final.output_text)["ok"], bool)


def test_every_runtime_answers_in_the_same_shapes(results):
    for what in ("tool", "schema"):
        shapes = {model: (results[model][what][0], shape(results[model][what][1])) for model in MODELS}
        assert len({repr(s) for s in shapes.values()}) == 1, shapes
    assert len({repr(shape(results[m]["created"])[0][0]) for m in MODELS}) == 1


@pytest.mark.parametrize("model", MODELS)
def test_two_turns_with_previous_response_id(stack, model):
    gateway, _ = stack
    c = client(gateway)
    first = c.responses.create(model=model, input="Remember the word apple.", max_output_tokens=16)
    second = c.responses.create(model=model, input="Which word?", previous_response_id=first.id, max_output_tokens=16)
    assert second.previous_response_id == first.id
    # The second turn was generated from the first turn's input and output, then its own.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    items = c.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in items] == ["message", "message", "message"]
    assert [i.role for i in items] == ["user", "assistant", "user"]
    assert c.responses.retrieve(second.id).output_text == second.output_text
    c.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(first.id)
    # The second turn carries its own context: it can still be continued.
    third = c.responses.create(model=model, input="Again?", previous_response_id=second.id, max_output_tokens=16)
    assert third.status in ("completed", "incomplete")


def test_another_tenants_response_is_not_found(stack):
    gateway, _ = stack
    mine = client(gateway, "a").responses.create(model="sim-vllm", input="secret", max_output_tokens=16)
    theirs = client(gateway, "b")
    with pytest.raises(openai.NotFoundError):
        theirs.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError) as continued:
        theirs.responses.create(model="sim-vllm", input="more", previous_response_id=mine.id)
    assert continued.value.body["param"] == "previous_response_id"
    # Still there for its owner: the refusals touched nothing.
    assert client(gateway, "a").responses.retrieve(mine.id).id == mine.id


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": "message", "role": "user"}]}, "input[0].content"),
        ({"input": [{"type": "function_call_output", "call_id": "call_nowhere", "output": "1"}]}, "input[0].call_id"),
        ({"input": [{"type": "banana"}]}, "input[0].type"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "hi", "background": True}, "background"),
        ({"input": "hi", "reasoning": {"effort": "high"}}, "reasoning"),
    ],
)
def test_malformed_and_unsupported_requests_are_400_naming_the_param(stack, body, param):
    gateway, _ = stack
    r = raw(gateway, "POST", "/v1/responses", json={"model": "sim-vllm", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_a_model_the_tenant_may_not_use_is_not_found(stack):
    gateway, _ = stack
    missing = raw(gateway, "POST", "/v1/responses", json={"model": "no-such-model", "input": "hi"})
    hidden = raw(gateway, "POST", "/v1/responses", tenant="b", json={"model": "native", "input": "hi"})
    assert missing.status_code == hidden.status_code == 404
    assert hidden.json()["error"]["code"] == "model_not_found" and "native" in hidden.json()["error"]["message"]
    assert raw(gateway, "POST", "/v1/responses", tenant="nobody", json={"model": "native"}).status_code == 401


def metric(gateway, name: str, **labels) -> float:
    total = 0.0
    for line in httpx.get(gateway.url + "/metrics", timeout=10).text.splitlines():
        if line.split("{")[0].split(" ")[0] == name and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_client_leaving_mid_stream_frees_the_work_and_the_lease(stack):
    gateway, slow = stack
    body = {"model": "slow", "input": "go on", "stream": True, "max_output_tokens": 400}
    before = metric(gateway, "switchyard_client_cancellations_total", phase="mid_stream")
    with httpx.stream(
        "POST", gateway.url + "/v1/responses", json=body, headers={"authorization": f"Bearer {key('capped')}"}
    ) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: leaving its loop would close the response
        created = json.loads(next(line for line in lines if line.startswith("data: "))[6:])
        while "response.output_text.delta" not in next(lines):
            pass
        # While it streams, the tenant's one concurrency slot is held.
        assert metric(gateway, "switchyard_quota_leases_held") == 1
        assert metric(gateway, "switchyard_inflight_requests", model="slow") == 1
        busy = raw(gateway, "POST", "/v1/responses", tenant="capped", json={"model": "sim-vllm", "input": "x"})
        assert busy.status_code == 429, busy.text
    assert wait_for(lambda: metric(gateway, "switchyard_client_cancellations_total", phase="mid_stream") == before + 1)
    assert wait_for(lambda: metric(gateway, "switchyard_inflight_requests", model="slow") == 0)
    assert wait_for(lambda: metric(gateway, "switchyard_backend_inflight", backend="slow") == 0)
    assert wait_for(lambda: metric(gateway, "switchyard_quota_leases_held") == 0)
    assert metric(gateway, "switchyard_live_tickets") == 0
    # A response its client left is never stored.
    assert raw(gateway, "GET", f"/v1/responses/{created['response']['id']}", tenant="capped").status_code == 404
    # The lease went with the client: the tenant may start again at once.
    again = raw(gateway, "POST", "/v1/responses", tenant="capped", json={"model": "sim-vllm", "input": "x"})
    assert again.status_code == 200, again.text
