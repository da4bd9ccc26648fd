"""/v1/embeddings, /tokenize and /detokenize through a real gateway process in front of
the runtime simulators (and the native engine), with the official `openai` client
validating every answer strictly: the answer's shape, the 400s, tenant isolation, the
tenant's token quota charged with the embedding usage (and not with tokenizing), and a
client that leaves mid-call closing the upstream call."""

from __future__ import annotations

import base64
import struct
import time

import httpx
import openai
import pytest

from policies.auth import hash_key
from simulators.testing import start_simulator
from tests.procs import start_gateway

TENANTS = {
    "a": {"models": ["emb", "emb-sg", "chat", "tgi", "nat"]},
    "tpm": {"models": ["emb", "chat"], "tokens_per_minute": 50, "requests_per_minute": 100},
}


def key(tenant: str) -> str:
    return f"sk-sy-{tenant}-embeddings-key"


@pytest.fixture(scope="module")
def stack(module_tmp):
    sims = {
        "pool": start_simulator(
            "vllm", wait=False, model_name="e5", runner="pooling", embedding_dim=32, max_model_len=64
        ),
        "sg": start_simulator(
            "sglang", wait=False, model_name="e5", is_embedding=True, health_latency=0, embedding_dim=32
        ),
        "gen": start_simulator("vllm", wait=False, model_name="tiny", max_model_len=64),
        "tgi": start_simulator("tgi", wait=False, model_name="tiny"),
    }
    for sim in sims.values():
        sim.wait_ready()

    def backend(name: str, adapter: str, sim, **options) -> dict:
        served = "e5" if name in ("pool", "sg", "secret") else "tiny"
        return {"name": name, "adapter": adapter, "url": sim.url, "served_model": served, "options": options}

    config = {
        "models": {
            "emb": {"backends": [backend("pool", "vllm", sims["pool"], embeddings=True)]},
            "emb-sg": {"backends": [backend("sg", "sglang", sims["sg"], embeddings=True)]},
            "secret": {"backends": [backend("secret", "vllm", sims["pool"], embeddings=True)]},
            "chat": {"backends": [backend("gen", "vllm", sims["gen"])]},
            "tgi": {"backends": [backend("tgi", "tgi", sims["tgi"])]},
            "nat": {"backends": [{"name": "nat", "adapter": "native", "model_path": "builtin:tiny"}]},
        },
        "auth": {"mode": "keys", "api_keys": [{"sha256": hash_key(key(t)), "tenant": t} for t in TENANTS]},
        "tenants": TENANTS,
        "access_log": False,
    }
    gateway = start_gateway(module_tmp, config)
    yield gateway, sims
    gateway.stop()
    for sim in sims.values():
        sim.stop()


def client(gateway, tenant: str = "a", strict: bool = True) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=key(tenant), max_retries=0, timeout=30, _strict_response_validation=strict
    )


def post(gateway, path: str, body: dict, tenant: str = "a", timeout: float = 30) -> httpx.Response:
    return httpx.post(
        gateway.url + path, json=body, headers={"authorization": f"Bearer {key(tenant)}"}, timeout=timeout
    )


def error_of(exc: openai.APIStatusError) -> dict:
    return exc.body if isinstance(exc.body, dict) and "message" in exc.body else exc.body["error"]  # type: ignore[index]


def test_float_base64_and_the_clients_default_agree(stack):
    gateway, _ = stack
    c = client(gateway)
    floats = c.embeddings.create(model="emb", input=["the cat sat", "a dog"], encoding_format="float")
    assert floats.object == "list" and floats.model == "emb"  # the tenant's model name, not the runtime's
    assert [d.index for d in floats.data] == [0, 1] and all(d.object == "embedding" for d in floats.data)
    assert all(len(d.embedding) == 32 for d in floats.data)
    assert (floats.usage.prompt_tokens, floats.usage.total_tokens) == (5, 5)
    # Base64 on the wire cannot pass the client's strict validation whatever the server (its
    # type says a list of floats and it validates before decoding): the raw answer is
    # checked by hand, and the client's own decoding (its default asks for base64) compared.
    raw = post(
        gateway, "/v1/embeddings", {"model": "emb", "input": ["the cat sat", "a dog"], "encoding_format": "base64"}
    )
    packed = raw.json()
    assert list(packed) == ["object", "data", "model", "usage"] and packed["model"] == "emb"
    assert packed["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    for plain, coded in zip(floats.data, packed["data"]):
        assert list(coded) == ["object", "index", "embedding"]
        vector = base64.b64decode(coded["embedding"])
        assert list(struct.unpack(f"<{len(vector) // 4}f", vector)) == pytest.approx(plain.embedding, abs=1e-6)
    default = client(gateway, strict=False).embeddings.create(model="emb", input="the cat sat")
    assert default.data[0].embedding == pytest.approx(floats.data[0].embedding, abs=1e-6)
    explicit = client(gateway, strict=False).embeddings.create(model="emb", input="a dog", encoding_format="base64")
    assert explicit.data[0].embedding == packed["data"][1]["embedding"]  # left as sent, as asked


def test_every_input_form_and_sglang(stack):
    gateway, _ = stack
    c = client(gateway)
    assert c.embeddings.create(model="emb", input=[5, 6, 7], encoding_format="float").usage.prompt_tokens == 3
    both = c.embeddings.create(model="emb", input=[[5, 6], [7]], encoding_format="float")
    assert len(both.data) == 2 and both.usage.prompt_tokens == 3
    sg = c.embeddings.create(model="emb-sg", input=["one two three"], encoding_format="float")
    assert sg.model == "emb-sg" and len(sg.data[0].embedding) == 32 and sg.usage.prompt_tokens == 3


def test_the_400s(stack):
    gateway, _ = stack
    c = client(gateway)
    for model in ("chat", "tgi"):
        with pytest.raises(openai.BadRequestError) as none:
            c.embeddings.create(model=model, input="x")
        assert error_of(none.value)["param"] == "model" and f"`{model}`" in error_of(none.value)["message"]
    for bad in ("", ["x"] * 2049, ["x", 5]):
        with pytest.raises(openai.BadRequestError) as info:
            c.embeddings.create(model="emb", input=bad)  # type: ignore[arg-type]
        assert error_of(info.value)["param"] == "input"
    with pytest.raises(openai.BadRequestError) as dims:
        c.embeddings.create(model="emb", input="x", dimensions=8)
    assert error_of(dims.value)["param"] == "dimensions" and "matryoshka" in error_of(dims.value)["message"]
    tgi = post(gateway, "/tokenize", {"model": "tgi", "prompt": "x"})
    assert tgi.status_code == 400 and tgi.json()["error"]["param"] == "model"


def test_tokenize_and_detokenize_answer_vllms_shape(stack):
    gateway, sims = stack
    body = {"model": "chat", "prompt": "the cat sat", "return_token_strs": True}
    via = post(gateway, "/tokenize", body)
    direct = httpx.post(sims["gen"].url + "/tokenize", json={**body, "model": "tiny"}).json()
    assert via.status_code == 200 and via.json() == direct
    assert list(via.json()) == ["count", "max_model_len", "tokens", "token_strs"]
    chat = post(gateway, "/tokenize", {"model": "chat", "messages": [{"role": "user", "content": "a b c"}]}).json()
    assert chat["count"] == 5 and chat["token_strs"] is None
    back = post(gateway, "/detokenize", {"model": "chat", "tokens": direct["tokens"]})
    assert back.json() == {"prompt": "the cat sat"}
    assert post(gateway, "/tokenize", {"model": "chat", "prompt": 5}).json()["error"]["param"] == "prompt"


def test_a_model_outside_the_tenants_list_answers_as_a_missing_one(stack):
    gateway, _ = stack
    for path, body in (
        ("/v1/embeddings", {"input": "x"}),
        ("/tokenize", {"prompt": "x"}),
        ("/detokenize", {"tokens": [1]}),
    ):
        hidden = post(gateway, path, {**body, "model": "secret"})
        missing = post(gateway, path, {**body, "model": "nope"})
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["error"]["message"].replace("secret", "X") == missing.json()["error"]["message"].replace(
            "nope", "X"
        )
        assert post(gateway, path, {**body, "model": "emb"}, tenant="nobody").status_code == 401


def test_embedding_and_tokenize_calls_reserve_their_bound_and_are_charged_their_count(stack):
    gateway, _ = stack
    text = " ".join(["w"] * 10)  # 10 tokens for the simulator; 19 bytes, so the gateway reserves 19 + 4
    first = post(gateway, "/v1/embeddings", {"model": "emb", "input": text}, tenant="tpm")
    assert first.status_code == 200 and first.json()["usage"]["prompt_tokens"] == 10
    assert int(first.headers["x-ratelimit-remaining-tokens"]) == 50 - 23  # the reservation at admission
    tokenized = post(gateway, "/tokenize", {"model": "chat", "prompt": text}, tenant="tpm")
    assert tokenized.status_code == 200
    # 50 - 10 charged for the embedding, 23 reserved for tokenizing the same text.
    assert int(tokenized.headers["x-ratelimit-remaining-tokens"]) == 50 - 10 - 23
    assert (
        int(tokenized.headers["x-ratelimit-remaining-requests"])
        == int(first.headers["x-ratelimit-remaining-requests"]) - 1
    )
    counted = tokenized.json()["count"]
    second = post(gateway, "/v1/embeddings", {"model": "emb", "input": "x"}, tenant="tpm")
    # Tokenizing was charged its count, as any call that makes a runtime tokenize.
    assert int(second.headers["x-ratelimit-remaining-tokens"]) == 50 - 10 - counted - 5
    refused = post(gateway, "/v1/embeddings", {"model": "emb", "input": " ".join(["w"] * 20)}, tenant="tpm")
    assert refused.status_code == 429
    too_large = post(gateway, "/v1/embeddings", {"model": "emb", "input": " ".join(["w"] * 30)}, tenant="tpm")
    assert too_large.status_code == 400 and too_large.json()["error"]["code"] == "request_exceeds_tpm_limit"


def test_a_client_leaving_mid_embedding_closes_the_upstream_call(stack):
    gateway, sims = stack
    sim = sims["pool"]
    sim.reset()
    with pytest.raises(httpx.ReadTimeout):
        post(gateway, "/v1/embeddings", {"model": "emb", "input": "[[sim:ttft_ms=5000]] hello"}, timeout=0.5)
    deadline = time.monotonic() + 5
    while not sim.stats()["aborts"]:
        assert time.monotonic() < deadline, sim.stats()
        time.sleep(0.05)
    (abort,) = sim.stats()["aborts"]
    assert abort["how"] == "disconnect" and abort["path"] == "/v1/embeddings"
    counted = 'switchyard_requests_total{backend="pool",model="emb",status="499",track=""}'
    while counted not in httpx.get(gateway.url + "/metrics").text:
        assert time.monotonic() < deadline, "the gateway did not count the request as cancelled"
        time.sleep(0.05)


def test_the_native_engine_embeds_and_tokenizes_like_transformers(stack):
    transformers = pytest.importorskip("transformers")
    import torch
    import torch.nn.functional as F

    from engine.builtin import resolve_model_path

    gateway, _ = stack
    path = str(resolve_model_path("builtin:tiny"))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    text = "The weather in Paris"
    result = client(gateway).embeddings.create(model="nat", input=text, encoding_format="float")
    ids = tok(text).input_ids
    with torch.no_grad():
        expected = F.normalize(model.model(torch.tensor([ids])).last_hidden_state[0, -1], dim=-1)
    assert torch.allclose(torch.tensor(result.data[0].embedding), expected, atol=1e-4)
    assert result.usage.prompt_tokens == len(ids)
    tokens = post(gateway, "/tokenize", {"model": "nat", "prompt": text}).json()
    assert tokens["tokens"] == ids and tokens["count"] == len(ids)
    # The text work ran on the pool (adapters/native_work.py), which /metrics shows back at zero.
    shown = httpx.get(gateway.url + "/metrics").text
    assert "switchyard_native_text_work_waiting 0.0" in shown
    assert "switchyard_native_text_work_running 0.0" in shown


@pytest.mark.parametrize("path", ["/v1/embeddings", "/tokenize"])
def test_the_calls_that_generate_nothing_keep_the_request_rules_of_chat(stack, path):
    # One reading of a request for every route (gateway/http/request_io.py, policies/auth.py):
    # two credentials are refused, a body nested past limits.max_json_depth is a 400,
    # and a client's malformed x-request-id is replaced by the gateway's own.
    gateway, _ = stack
    body = {"model": "emb", "input": "hi"} if path == "/v1/embeddings" else {"model": "emb", "prompt": "hi"}
    twice = httpx.post(
        gateway.url + path,
        json=body,
        headers=[("authorization", f"Bearer {key('a')}"), ("authorization", f"Bearer {key('b')}")],
        timeout=30,
    )
    assert twice.status_code == 401
    nested: object = "x"
    for _ in range(100):
        nested = [nested]
    deep = post(gateway, path, {**body, "user": nested})
    assert deep.status_code == 400 and deep.json()["error"]["type"] == "invalid_request_error"
    odd = httpx.post(
        gateway.url + path,
        json=body,
        headers={"authorization": f"Bearer {key('a')}", "x-request-id": "not ok!" * 40},
        timeout=30,
    )
    assert odd.headers["x-request-id"] != "not ok!" * 40 and len(odd.headers["x-request-id"]) == 32
