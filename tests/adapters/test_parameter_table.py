"""The request-parameter table (docs/adapters.md, "Request parameters per runtime"):
the table in the docs is each adapter's declared `parameters`, and every cell holds
for that adapter's request building. Each cell, for each policy:

- pass: the value reaches the runtime's request as the client wrote it;
- emulate: the request still goes out, rewritten as the notes say;
- reject: `unsupported_params: reject` refuses it (400 naming the runtime, before any
  call); `drop` leaves it out, and `parameters.unsupported` names it (the gateway's
  x-switchyard-dropped-params header reads that).

HTTP dialects build their bodies without a network; the native engine's parameters
are checked on its engine parameters (and `stop`, applied by the adapter itself, on a
real generation of the tiny model). Each simulator through a gateway:
tests/adapters/test_runtimes_e2e.py."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from adapters.base import SAMPLING_PARAMETERS, Adapter, Finish, GenerationRequest, SamplingParams, TextDelta
from adapters.errors import GatewayError
from adapters.llamacpp import LlamaCppDialect
from adapters.openai import OpenAIDialect
from adapters.sglang import SGLangDialect
from adapters.tgi import TGIDialect
from adapters.trtllm import TRTLLMDialect
from adapters.vllm import VLLMDialect
from tests.adapters.wire_samples import PARAMETER_VALUES as VALUES
from tests.adapters.wire_samples import parameter_on_the_wire as wire

ROOT = Path(__file__).resolve().parents[2]
HTTP_DIALECTS: dict[str, type[OpenAIDialect]] = {
    "vllm": VLLMDialect,
    "sglang": SGLangDialect,
    "trtllm": TRTLLMDialect,
    "tgi": TGIDialect,
    "llamacpp": LlamaCppDialect,
    "openai": OpenAIDialect,
}
RUNTIMES = ("vllm", "sglang", "trtllm", "tgi", "llamacpp", "native", "openai")  # the docs table's columns


def parameter_support(runtime: str):
    if runtime == "native":
        from adapters.native import NativeAdapter

        return NativeAdapter.parameters
    return HTTP_DIALECTS[runtime].parameters


def request(policy: str = "reject", **sampling: Any) -> GenerationRequest:
    if sampling.get("logprobs"):
        sampling["top_logprobs"] = 2
    return GenerationRequest(
        request_id="r-1",
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        sampling=SamplingParams(**sampling),
        unsupported_params=policy,  # type: ignore[arg-type]
    )


def cells(kind: str, runtimes: tuple[str, ...] = tuple(HTTP_DIALECTS)) -> list[tuple[str, str]]:
    return [(p, r) for p in SAMPLING_PARAMETERS for r in runtimes if parameter_support(r).support(p) == kind]


def body_of(runtime: str, req: GenerationRequest) -> dict[str, Any]:
    return HTTP_DIALECTS[runtime]("be-1", "m").body(req, stream=False)


# ---- the table in the docs is the adapters' tables ------------------------------------------


def docs_table() -> dict[str, dict[str, str]]:
    text = (ROOT / "docs" / "adapters.md").read_text()
    block = text.split("<!-- parameter table: generated from each adapter's `parameters` -->\n", 1)[1]
    lines = [line for line in block.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["parameter", *RUNTIMES]
    table = {}
    for line in lines[2:]:
        name, *row = (c.strip() for c in line.strip("|").split("|"))
        table[name.strip("`")] = dict(zip(RUNTIMES, row))
    return table


def test_the_docs_table_is_every_adapters_declared_table():
    expected = {p: {r: parameter_support(r).support(p) for r in RUNTIMES} for p in SAMPLING_PARAMETERS}
    assert docs_table() == expected


def test_the_readme_names_exactly_what_tgi_rejects():
    readme = (ROOT / "README.md").read_text()
    sentence = re.search(r"Behind TGI, (.*?) are answered with 400", readme, re.DOTALL)
    assert sentence is not None
    named = re.findall(r"`(\w+)`", sentence.group(1))
    assert named == [p for p in SAMPLING_PARAMETERS if parameter_support("tgi").support(p) == "reject"]


def test_every_rejection_and_emulation_says_why():
    for runtime in RUNTIMES:
        table = parameter_support(runtime)
        for name, why in {**table.rejected, **table.emulated}.items():
            assert name in SAMPLING_PARAMETERS and why, (runtime, name)


# ---- each cell against the adapter's request building --------------------------------------


@pytest.mark.parametrize(("name", "runtime"), cells("pass"))
async def test_pass_reaches_the_runtime_as_written(name, runtime):
    for policy in ("reject", "drop"):
        body = body_of(runtime, request(policy, **{name: VALUES[name]}))
        assert body[name] == wire(name), (runtime, name, policy, body)


# (runtime, parameter) -> (the sampling to send, what the body must then say)
EMULATIONS = {
    ("tgi", "top_p"): [
        ({"top_p": 1.0}, lambda body: "top_p" not in body),  # TGI takes only 0 < top_p < 1
        ({"top_p": 0.0}, lambda body: "top_p" not in body and body["temperature"] == 0.0),
        ({"top_p": 0.9}, lambda body: body["top_p"] == 0.9),
    ],
    ("tgi", "repetition_penalty"): [
        (
            {"repetition_penalty": 1.2},
            lambda body: abs(body["presence_penalty"] - (1.2 - 2.0)) < 1e-9 and "repetition_penalty" not in body,
        ),
    ],
    # n requests of one choice each: the dispatcher fans out where the capability is missing
    ("tgi", "n"): [({"n": 2}, lambda body: "n" not in body and not TGIDialect("t").capabilities.n)],
    ("llamacpp", "repetition_penalty"): [
        ({"repetition_penalty": 1.2}, lambda body: body["repeat_penalty"] == 1.2 and "repetition_penalty" not in body),
    ],
    ("llamacpp", "n"): [({"n": 2}, lambda body: "n" not in body and not LlamaCppDialect("l").capabilities.n)],
}


def test_every_emulation_cell_has_its_check():
    assert set(EMULATIONS) == {(r, p) for p, r in cells("emulate", RUNTIMES)}


@pytest.mark.parametrize(("runtime", "name"), list(EMULATIONS))
async def test_emulate_sends_the_rewritten_request(name, runtime):
    for sampling, holds in EMULATIONS[(runtime, name)]:
        for policy in ("reject", "drop"):
            body = body_of(runtime, request(policy, **sampling))
            assert holds(body), (runtime, sampling, body)


@pytest.mark.parametrize(("name", "runtime"), cells("reject"))
async def test_reject_refuses_or_drops_as_the_policy_says(name, runtime):
    with pytest.raises(GatewayError) as info:
        body_of(runtime, request("reject", **{name: VALUES[name]}))
    err = info.value
    assert (err.status, err.code, err.param) == (400, "unsupported_by_backend", name)
    assert "be-1" not in err.message and "unsupported_params: drop" in err.message and name in err.message

    dropped = request("drop", **{name: VALUES[name]})
    body = body_of(runtime, dropped)
    assert name not in body and body["messages"] == dropped.messages
    assert HTTP_DIALECTS[runtime].parameters.unsupported(dropped.sampling) == [name]


@pytest.mark.parametrize("name", [p for p, _ in cells("reject", ("tgi",))])
async def test_a_neutral_value_asks_nothing(name):
    neutral = {"top_k": -1, "presence_penalty": 0.0, "logit_bias": {}, "ignore_eos": False, "min_tokens": 0}
    value = neutral.get(name, [] if isinstance(VALUES[name], list) else 0)
    assert TGIDialect.parameters.unsupported(request(**{name: value}).sampling) == []
    body_of("tgi", request("reject", **{name: value}))  # not refused


async def test_several_rejected_parameters_are_named_together():
    sampling = {"top_k": 40, "logit_bias": {5: 1.0}, "ignore_eos": True}
    with pytest.raises(GatewayError) as info:
        body_of("tgi", request("reject", **sampling))
    assert "top_k, logit_bias, ignore_eos" in info.value.message
    assert TGIDialect.parameters.unsupported(request(**sampling).sampling) == ["top_k", "logit_bias", "ignore_eos"]


# ---- the native engine ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def native(tiny_model_dir):
    from tests.native_adapters import started_native  # torch, only when this fixture runs

    yield from started_native(tiny_model_dir, served_name="m", num_blocks=32, block_size=16, max_model_len=128)


# engine parameter the native adapter sets for each table row (stop is the adapter's own)
NATIVE_VALUE = {"logprobs": ("logprobs", 2), "logit_bias": ("logit_bias", {5: 1.0})}


@pytest.mark.parametrize("name", [p for p, _ in cells("pass", ("native",)) if p != "stop"])
async def test_native_passes_each_parameter_to_its_engine(native: Adapter, name):
    assert parameter_support("native").support(name) == "pass"
    for policy in ("reject", "drop"):
        params = native._engine_params(request(policy, **{name: VALUES[name]}), prompt_len=3, max_model_len=128)
        attribute, value = NATIVE_VALUE.get(name, (name, VALUES[name]))
        assert getattr(params, attribute) == value, (name, params)


async def test_native_applies_stop_strings_itself(native: Adapter):
    async def text_of(**sampling: Any) -> tuple[str, str]:
        req = dataclasses.replace(request(temperature=0.0, max_tokens=24, **sampling), stream=True)
        events = [e async for e in native.generate(req)]
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        return text, next(e.reason for e in events if isinstance(e, Finish))

    whole, _ = await text_of()
    stop = whole[len(whole) // 2 : len(whole) // 2 + 3]
    assert len(whole) > 6 and stop.strip()
    cut, reason = await text_of(stop=[stop])
    assert cut == whole[: whole.index(stop)] and reason == "stop"
