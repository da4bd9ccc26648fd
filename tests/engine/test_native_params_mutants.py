"""adapters/native.py's reading of a request, on the tiny model (one engine for the
module): each canonical sampling parameter as the engine gets it (defaults included),
the context limits at, below and above their boundaries with their whole messages, the
vocabulary bounds of token ids, logit_bias and stop_token_ids, and the prompt's refusals."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from adapters.base import GenerationRequest, SamplingParams, Usage
from adapters.errors import GatewayError
from adapters.native import NativeAdapter
from adapters.native_work import TextWork
from engine.make_tiny import make_tiny
from engine.text.tokenizer import TextTokenizer
from tests.native_adapters import started_native, with_bos

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("params") / "tiny")


@pytest.fixture(scope="module")
def adapter(model_dir: Path):
    yield from started_native(model_dir, one_thread=True, num_blocks=16, block_size=16, max_model_len=MAX_MODEL_LEN)


def chat(**sampling) -> GenerationRequest:
    return GenerationRequest(
        "r", "m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(**sampling)
    )


def completion(prompt, **sampling) -> GenerationRequest:
    sampling.setdefault("max_tokens", 2)
    return GenerationRequest("r", "m", kind="completion", prompt=prompt, sampling=SamplingParams(**sampling))


def refused(adapter, request: GenerationRequest) -> GatewayError:
    async def go() -> None:
        async for _ in adapter.generate(request):
            pass

    with pytest.raises(GatewayError) as info:
        asyncio.run(go())
    assert info.value.status == 400
    return info.value


def usage_of(adapter, request: GenerationRequest) -> Usage:
    async def go() -> list:
        return [e async for e in adapter.generate(request)]

    events = asyncio.run(go())
    assert isinstance(events[-1], Usage)
    return events[-1]


# ---- sampling parameters as the engine gets them ----------------------------------------


def test_the_runtime_defaults_fill_what_the_request_left_out(adapter) -> None:
    params = adapter._engine_params(chat(), 10, MAX_MODEL_LEN)
    got = (params.max_tokens, params.temperature, params.top_p, params.top_k, params.min_p)
    assert got == (MAX_MODEL_LEN - 10, 1.0, 1.0, 0, 0.0)
    got = (params.presence_penalty, params.frequency_penalty, params.repetition_penalty, params.logit_bias)
    assert got == (0.0, 0.0, 1.0, None)
    got = (params.seed, params.n, params.stop_token_ids, params.ignore_eos, params.min_tokens, params.logprobs)
    assert got == (None, 1, [], False, 0, None)


def test_every_sampling_parameter_reaches_the_engine(adapter) -> None:
    sampling = dict(
        max_tokens=7,
        temperature=0.5,
        top_p=0.9,
        top_k=5,
        min_p=0.1,
        presence_penalty=0.2,
        frequency_penalty=0.3,
        repetition_penalty=1.1,
        logit_bias={3: 1.5},
        seed=11,
        n=2,
        stop_token_ids=[4],
        ignore_eos=True,
        min_tokens=1,
        logprobs=True,
        top_logprobs=3,
    )
    request = chat(**sampling)
    params = adapter._engine_params(request, 10, MAX_MODEL_LEN)
    expected = {k: v for k, v in sampling.items() if k != "top_logprobs"} | {"logprobs": 3}
    assert {k: getattr(params, k) for k in expected} == expected
    assert params.logit_bias is not request.sampling.logit_bias  # the engine's own copy
    assert params.stop_token_ids is not request.sampling.stop_token_ids


def test_zero_values_are_not_defaults(adapter) -> None:
    params = adapter._engine_params(chat(temperature=0.0, top_k=0, logprobs=True, top_logprobs=0), 10, MAX_MODEL_LEN)
    assert (params.temperature, params.top_k, params.logprobs) == (0.0, 0, 0)
    assert adapter._engine_params(chat(top_k=-1), 10, MAX_MODEL_LEN).top_k == 0  # vLLM's "off"
    assert adapter._engine_params(chat(top_logprobs=4), 10, MAX_MODEL_LEN).logprobs is None  # not asked


def test_a_value_the_engine_refuses_is_a_400_saying_why(adapter) -> None:
    with pytest.raises(GatewayError) as info:
        adapter._engine_params(chat(top_p=0.0), 10, MAX_MODEL_LEN)
    assert (info.value.status, info.value.message) == (400, "top_p must be in (0, 1]")


def test_echo_with_logprobs_is_refused_on_echo(adapter) -> None:
    request = completion("hi", logprobs=True)
    request.echo = True
    with pytest.raises(GatewayError) as info:
        adapter._engine_params(request, 10, MAX_MODEL_LEN)
    assert (info.value.status, info.value.param) == (400, "echo")
    assert info.value.message == "echo with logprobs (prompt logprobs) is not supported by the native engine"


# ---- the context -------------------------------------------------------------------------


def test_a_prompt_one_token_short_of_the_context_is_taken_and_one_at_it_is_not(adapter) -> None:
    assert adapter._engine_params(completion("x", max_tokens=None), MAX_MODEL_LEN - 1, MAX_MODEL_LEN).max_tokens == 1
    with pytest.raises(GatewayError) as info:
        adapter._engine_params(completion("x", max_tokens=None), MAX_MODEL_LEN, MAX_MODEL_LEN)
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "prompt")
    assert info.value.message == (
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your prompt resulted in "
        f"{MAX_MODEL_LEN} tokens. Please reduce the length of the prompt."
    )


def test_prompt_and_completion_may_fill_the_context_and_not_one_token_more(adapter) -> None:
    assert adapter._engine_params(chat(max_tokens=MAX_MODEL_LEN - 10), 10, MAX_MODEL_LEN).max_tokens == 54
    with pytest.raises(GatewayError) as info:
        adapter._engine_params(chat(max_tokens=MAX_MODEL_LEN - 9), 10, MAX_MODEL_LEN)
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "messages")
    assert info.value.message == (
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you requested "
        f"{MAX_MODEL_LEN + 1} tokens (10 in the messages, 55 in the completion). "
        "Please reduce the length of the messages or completion."
    )


def test_a_generation_may_fill_the_context_exactly(adapter) -> None:
    prompt = [5] * (MAX_MODEL_LEN - 3)
    usage = usage_of(adapter, completion(prompt, max_tokens=3, ignore_eos=True))
    assert (usage.prompt_tokens, usage.completion_tokens) == (MAX_MODEL_LEN - 3, 3)
    assert refused(adapter, completion(prompt, max_tokens=4)).code == "context_length_exceeded"


# ---- token ids -----------------------------------------------------------------------------


def test_prompt_token_ids_at_both_ends_of_the_vocabulary(adapter) -> None:
    vocab = adapter.tokenizer.vocab_size
    assert usage_of(adapter, completion([0, vocab - 1])).prompt_tokens == 2
    for bad in (vocab, -1):
        error = refused(adapter, completion([5, bad]))
        assert error.param == "prompt" and error.message == f"prompt token ids must be in [0, {vocab})"


@pytest.mark.parametrize("field", ["logit_bias", "stop_token_ids"])
def test_logit_bias_and_stop_token_ids_at_both_ends_of_the_vocabulary(adapter, field) -> None:
    vocab = adapter.tokenizer.vocab_size

    def ids(*token_ids: int) -> dict:
        return {field: {t: 1.0 for t in token_ids} if field == "logit_bias" else list(token_ids)}

    params = adapter._engine_params(chat(**ids(0, vocab - 1)), 10, MAX_MODEL_LEN)
    assert getattr(params, field) == ids(0, vocab - 1)[field]
    for bad in (vocab, -1):
        with pytest.raises(GatewayError) as info:
            adapter._engine_params(chat(**ids(3, bad)), 10, MAX_MODEL_LEN)
        assert (info.value.status, info.value.param) == (400, field)
        assert info.value.message == f"token id {bad} is outside the vocabulary [0, {vocab})"


# ---- the prompt's refusals ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "param", "message"),
    [
        (GenerationRequest("r", "m", messages=[]), "messages", "messages must be a non-empty list"),
        (GenerationRequest("r", "m"), "messages", "messages must be a non-empty list"),
        (completion(None), "prompt", "prompt must be a string or a list of token ids"),
        (completion([1, "2"]), "prompt", "prompt must be a string or a list of token ids"),
        (completion(""), "prompt", "the prompt is empty"),
        (completion([]), "prompt", "the prompt is empty"),
    ],
)
def test_a_prompt_with_nothing_to_generate_from_is_refused_naming_its_field(adapter, request_, param, message) -> None:
    error = refused(adapter, request_)
    assert (error.param, error.message) == (param, message)


def test_messages_the_template_cannot_take_are_refused_on_messages(adapter) -> None:
    request = GenerationRequest("r", "m", messages=[{"role": "user", "content": [{"type": "image_url"}]}])
    error = refused(adapter, request)
    assert error.param == "messages" and "'image_url' is not supported by a text model" in error.message


def test_a_text_prompt_gets_the_tokenizers_special_tokens_and_a_rendered_chat_none(model_dir, tmp_path) -> None:
    """As vLLM: a completion's text is encoded with special tokens (a Llama's BOS), a chat's
    rendered template without (the template wrote its own)."""
    bos_dir = with_bos(model_dir, tmp_path / "bos")
    adapter = NativeAdapter("bos", str(bos_dir), engine_options={"num_blocks": 8, "max_model_len": MAX_MODEL_LEN})
    try:
        tok = TextTokenizer(bos_dir)
        usage = usage_of(adapter, completion("hi"))
        assert usage.prompt_tokens == len(tok.encode("hi")) + 1
        assert adapter._prompt_ids(completion("hi")) == [0, *tok.encode("hi")]
        rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
        assert rendered.endswith("<|im_start|>assistant\n")
        assert adapter._prompt_ids(chat()) == tok.encode(rendered)
        assert usage_of(adapter, chat(max_tokens=1)).prompt_tokens == len(tok.encode(rendered))
    finally:
        asyncio.run(adapter.aclose())


def test_a_completion_over_the_context_by_its_bytes_is_refused_on_prompt(adapter) -> None:
    error = refused(adapter, completion("x" * (MAX_MODEL_LEN * 16 + 16)))
    assert (error.code, error.param) == ("context_length_exceeded", "prompt")
    assert f"holds {MAX_MODEL_LEN * 16 + 16} bytes of text" in error.message


def test_a_prompt_is_tokenized_on_its_tenants_share_of_the_text_work(adapter, monkeypatch) -> None:
    work = TextWork(workers=1, per_tenant=1, max_waiting=10)
    monkeypatch.setattr("adapters.native.TEXT_WORK", work)
    request = chat(max_tokens=1)
    request.messages, request.tenant = [{"role": "user", "content": "a tenant's own prompt"}], "acme"

    async def go() -> None:
        gate = threading.Event()
        holder = asyncio.ensure_future(work.run("other", lambda: gate.wait(10)))
        while work.running == 0:
            await asyncio.sleep(0.001)
        generation = asyncio.ensure_future(usage_of_async(adapter, request))
        while work.waiting() == 0:
            await asyncio.sleep(0.001)
        assert work.waiting("acme") == 1
        gate.set()
        await asyncio.gather(holder, generation)

    asyncio.run(go())


async def usage_of_async(adapter, request: GenerationRequest) -> Usage:
    events = [e async for e in adapter.generate(request)]
    return events[-1]
