"""adapters/native_oneshot.py at its edges, on the tiny model (a real engine and tokenizer,
made once for the module): the context cap by bytes at, below and above its boundary, the
bytes a message or prompt counts, /tokenize's chat template arguments and
`continue_final_message`, /detokenize's vocabulary bounds, and the embeddings' refusals.
A second tokenizer of the same vocabulary adds a BOS token and has a template that shows
its arguments, so what is passed to `encode` and to the template can be seen."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from adapters.errors import GatewayError
from adapters.native_oneshot import (
    _content_bytes,
    check_context,
    detokenize,
    encode_inputs,
    request_text_bytes,
    tokenize,
)
from adapters.native_work import TextWork
from adapters.oneshot import DetokenizeRequest, EmbeddingRequest, TokenizeRequest
from engine.make_tiny import make_tiny
from engine.text.tokenizer import TextTokenizer
from tests.native_adapters import started_native, with_bos

MAX_MODEL_LEN = 64
MAX_TOKEN_BYTES = 16  # the tiny tokenizer's longest token, in bytes
LIMIT_BYTES = MAX_MODEL_LEN * MAX_TOKEN_BYTES  # the most bytes of text the cap lets through
# Shows every argument it is given, and writes an assistant's content upper-cased.
TEMPLATE = (
    "{%- for m in messages -%}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{%- if m['role'] == 'shout' -%}{{ m['content'] | upper }}{%- else -%}{{ m['content'] }}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}{%- endfor -%}"
    "{%- if tools -%}[tools {{ tools | length }}]{%- endif -%}"
    "{%- if greeting is defined -%}[greeting {{ greeting }}]{%- endif -%}"
    "{%- if continue_final_message is defined -%}[continue]{%- endif -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("oneshot-edges") / "tiny")


@pytest.fixture(scope="module")
def adapter(model_dir: Path):
    yield from started_native(model_dir, one_thread=True, num_blocks=16, max_model_len=MAX_MODEL_LEN)


@pytest.fixture(scope="module")
def bos_tok(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    """The tiny tokenizer with a BOS token (<|endoftext|>, id 0) added to every encode
    that asks for special tokens, and TEMPLATE as its chat template."""
    out = with_bos(model_dir, tmp_path_factory.mktemp("bos-tokenizer"))
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    tok = TextTokenizer(out)
    assert tok.encode("hi", add_special_tokens=True) == [0, *tok.encode("hi")]  # the BOS shows
    return tok


def run(coro):
    return asyncio.run(coro)


def refusal(coro) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        run(coro)
    assert (info.value.status, info.value.code) == (400, "context_length_exceeded")
    return info.value


# ---- the context cap by bytes (check_context) ----------------------------------------


def test_the_tiny_tokenizer_has_the_token_length_the_bounds_assume(adapter) -> None:
    assert adapter.tokenizer.max_token_bytes == MAX_TOKEN_BYTES
    assert adapter.async_engine.engine.max_model_len == MAX_MODEL_LEN


@pytest.mark.parametrize("extra", [0, MAX_TOKEN_BYTES - 1])
def test_a_prompt_whose_bytes_make_at_most_the_context_is_tokenized(adapter, extra) -> None:
    # (LIMIT_BYTES + 15) // 16 is still MAX_MODEL_LEN tokens at the least: not refused
    result = run(adapter.tokenize(TokenizeRequest("r", "m", prompt="x" * (LIMIT_BYTES + extra))))
    assert len(result.tokens) > 0 and result.max_model_len == MAX_MODEL_LEN


def test_a_prompt_one_token_over_by_its_bytes_is_refused_with_the_figures(adapter) -> None:
    error = refusal(adapter.tokenize(TokenizeRequest("r", "m", prompt="x" * (LIMIT_BYTES + MAX_TOKEN_BYTES))))
    assert error.param == "prompt"
    assert error.message == (
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, your input holds "
        f"{LIMIT_BYTES + MAX_TOKEN_BYTES} bytes of text, at least {MAX_MODEL_LEN + 1} tokens. "
        "Please reduce its length."
    )


def test_check_context_at_below_and_above_its_boundary(adapter) -> None:
    tok = adapter.tokenizer
    check_context(tok, MAX_MODEL_LEN, LIMIT_BYTES + MAX_TOKEN_BYTES - 1)  # at most 64 tokens: passes
    with pytest.raises(GatewayError) as over:
        check_context(tok, MAX_MODEL_LEN, LIMIT_BYTES + MAX_TOKEN_BYTES)
    assert (over.value.param, over.value.code) == ("messages", "context_length_exceeded")  # its default field


def test_non_ascii_text_counts_its_utf8_bytes(adapter) -> None:
    # "é" is two bytes: LIMIT_BYTES / 2 of them pass, eight more (16 bytes) are one token too many
    run(adapter.tokenize(TokenizeRequest("r", "m", prompt="é" * (LIMIT_BYTES // 2))))
    error = refusal(adapter.tokenize(TokenizeRequest("r", "m", prompt="é" * (LIMIT_BYTES // 2 + 8))))
    assert f"holds {LIMIT_BYTES + MAX_TOKEN_BYTES} bytes" in error.message


def test_a_lone_surrogate_counts_three_bytes_and_is_refused_not_crashed(adapter) -> None:
    # JSON may carry "\ud800": it has no UTF-8 form, and is counted as the three bytes it would take
    text = "\ud800" * (LIMIT_BYTES // 3 + 6)
    error = refusal(adapter.tokenize(TokenizeRequest("r", "m", prompt=text)))
    assert f"holds {len(text) * 3} bytes" in error.message


def test_messages_count_their_string_and_text_part_contents(adapter) -> None:
    half = "x" * (LIMIT_BYTES // 2)
    parts = [{"type": "text", "text": half}, {"type": "text", "text": "y" * MAX_TOKEN_BYTES}]
    messages = [{"role": "system", "content": half}, {"role": "user", "content": parts}]
    error = refusal(adapter.tokenize(TokenizeRequest("r", "m", messages=messages)))
    assert error.param == "messages" and f"holds {LIMIT_BYTES + MAX_TOKEN_BYTES} bytes" in error.message


def test_the_bytes_of_a_message_and_of_a_prompt() -> None:
    assert _content_bytes({"role": "user", "content": "héllo"}) == 6
    parts = [{"type": "text", "text": "ab"}, {"type": "image_url", "image_url": {}}, "cd", {"text": 5}, {"text": "é"}]
    assert _content_bytes({"role": "user", "content": parts}) == 4
    assert _content_bytes({"role": "assistant", "content": None}) == 0
    assert _content_bytes("not a message") == 0

    class Request:
        def __init__(self, messages=None, prompt=None) -> None:
            self.messages, self.prompt = messages, prompt

    assert request_text_bytes(Request(messages=[{"content": "abc"}, {"content": "é"}], prompt="ignored")) == 5
    assert request_text_bytes(Request(messages=[])) == 0
    assert request_text_bytes(Request(prompt="abcd")) == 4
    assert request_text_bytes(Request(prompt=[1, 2, 3])) == 0


def test_embeddings_cap_each_text_input_and_leave_token_ids_to_the_engine(adapter) -> None:
    error = refusal(adapter.embed(EmbeddingRequest("r", "m", inputs=["ok", "x" * (LIMIT_BYTES + MAX_TOKEN_BYTES)])))
    assert error.param == "input"
    # a text at the cap's boundary is not refused by it: the engine's own token count refuses it
    at_cap = refusal(adapter.embed(EmbeddingRequest("r", "m", inputs=["x" * LIMIT_BYTES])))
    assert at_cap.param == "input" and "bytes of text" not in at_cap.message


def test_embeddings_count_every_prompt_token(adapter) -> None:
    tok = adapter.tokenizer
    result = run(adapter.embed(EmbeddingRequest("r", "m", inputs=["Paris", [5, 6, 7]])))
    assert result.prompt_tokens == len(tok.encode("Paris", add_special_tokens=True)) + 3
    assert len(result.vectors) == 2


# ---- /tokenize ------------------------------------------------------------------------


def test_tokenize_adds_special_tokens_to_a_prompt_not_to_messages(bos_tok) -> None:
    plain = tokenize(bos_tok, 99, TokenizeRequest("r", "m", prompt="hi"))
    assert plain.tokens == [0, *bos_tok.encode("hi")] and plain.max_model_len == 99 and plain.token_strs is None
    asked = tokenize(bos_tok, 99, TokenizeRequest("r", "m", prompt="hi", add_special_tokens=False))
    assert asked.tokens == bos_tok.encode("hi")
    chat = tokenize(bos_tok, 99, TokenizeRequest("r", "m", messages=[{"role": "user", "content": "hi"}]))
    assert chat.tokens == bos_tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    empty = tokenize(bos_tok, 99, TokenizeRequest("r", "m"))
    assert empty.tokens == [0]


def test_tokenize_returns_each_tokens_string_when_asked(bos_tok) -> None:
    result = tokenize(bos_tok, 99, TokenizeRequest("r", "m", prompt="hi", return_token_strs=True))
    assert result.token_strs == [bos_tok.id_to_token(i) for i in result.tokens]
    assert result.token_strs[0] == "<|endoftext|>"


def test_chat_template_kwargs_reach_the_template_but_never_override_the_calls_own(bos_tok) -> None:
    messages = [{"role": "user", "content": "hi"}]
    kwargs = {
        "greeting": "hello",
        "messages": [{"role": "user", "content": "injected"}],
        "tools": [{"type": "function"}],
        "add_generation_prompt": True,
        "continue_final_message": True,
    }
    request = TokenizeRequest("r", "m", messages=messages, add_generation_prompt=False, chat_template_kwargs=kwargs)
    result = tokenize(bos_tok, 99, request)
    assert bos_tok.decode(result.tokens, skip_special_tokens=False) == (
        "<|im_start|>user\nhi<|im_end|>\n[greeting hello]"
    )


def test_tools_reach_the_template_and_none_are_none(bos_tok) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with_tools = TokenizeRequest("r", "m", messages=messages, tools=[{"type": "function"}] * 2)
    text = bos_tok.decode(tokenize(bos_tok, 99, with_tools).tokens, skip_special_tokens=False)
    assert "[tools 2]" in text
    no_tools = TokenizeRequest("r", "m", messages=messages, tools=[])
    assert "[tools" not in bos_tok.decode(tokenize(bos_tok, 99, no_tools).tokens, skip_special_tokens=False)


def test_continue_final_message_drops_the_generation_prompt_and_cuts_after_the_last_copy(bos_tok) -> None:
    messages = [{"role": "user", "content": "It is"}, {"role": "assistant", "content": " It is "}]
    request = TokenizeRequest("r", "m", messages=messages, continue_final_message=True)  # generation prompt asked
    text = bos_tok.decode(tokenize(bos_tok, 99, request).tokens, skip_special_tokens=False)
    assert text == "<|im_start|>user\nIt is<|im_end|>\n<|im_start|>assistant\n It is"


@pytest.mark.parametrize(
    "last",
    [
        {"role": "assistant", "content": "   "},
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": [{"type": "text", "text": "It is"}]},
        {"role": "shout", "content": "it is"},  # the template changes it: not found in the text
    ],
)
def test_continue_final_message_needs_a_last_message_with_text_found_in_the_render(bos_tok, last) -> None:
    request = TokenizeRequest("r", "m", messages=[{"role": "user", "content": "hi"}, last], continue_final_message=True)
    with pytest.raises(GatewayError) as info:
        tokenize(bos_tok, 99, request)
    assert (info.value.status, info.value.param) == (400, "messages")
    assert info.value.message == "continue_final_message needs a last message with text content to continue"


def test_a_message_the_template_cannot_take_is_a_400_on_messages(adapter) -> None:
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(GatewayError) as info:
        run(adapter.tokenize(TokenizeRequest("r", "m", messages=messages)))
    assert (info.value.status, info.value.param) == (400, "messages")
    assert "'image_url' is not supported by a text model" in info.value.message


# ---- /detokenize ----------------------------------------------------------------------


def test_detokenize_takes_every_id_of_the_vocabulary_and_none_outside(adapter) -> None:
    tok = adapter.tokenizer
    vocab = tok.vocab_size
    inside = run(adapter.detokenize(DetokenizeRequest("r", "m", tokens=[0, 74, vocab - 1])))
    assert inside.prompt == tok.decode([0, 74, vocab - 1], skip_special_tokens=False)
    for token in (vocab, -1):
        with pytest.raises(GatewayError) as info:
            detokenize(tok, DetokenizeRequest("r", "m", tokens=[74, token]))
        assert (info.value.status, info.value.param) == (400, "tokens")
        assert info.value.message == f"token id {token} is outside the vocabulary [0, {vocab})"


def test_an_input_the_engine_cannot_embed_is_its_400_as_the_engine_words_it(adapter) -> None:
    with pytest.raises(GatewayError) as info:
        run(adapter.embed(EmbeddingRequest("r", "m", inputs=["ok", []])))
    error = info.value
    assert (error.status, error.message, error.param, error.code) == (400, "input 1 is empty", "input", None)


def test_embedding_texts_are_encoded_with_special_tokens_and_ids_kept(bos_tok) -> None:
    ids = [5, 6]
    prompts = encode_inputs(bos_tok, EmbeddingRequest("r", "m", inputs=["hi", ids]))
    assert prompts == [[0, *bos_tok.encode("hi")], [5, 6]] and prompts[1] is not ids


@pytest.mark.parametrize("call", ["embed", "tokenize", "detokenize"])
def test_each_call_waits_on_its_tenants_share_of_the_text_work(adapter, monkeypatch, call) -> None:
    work = TextWork(workers=1, per_tenant=1, max_waiting=10)
    monkeypatch.setattr("adapters.native_oneshot.TEXT_WORK", work)
    requests = {
        "embed": lambda: adapter.embed(EmbeddingRequest("r", "m", inputs=["hi"], tenant="acme")),
        "tokenize": lambda: adapter.tokenize(TokenizeRequest("r", "m", prompt="hi", tenant="acme")),
        "detokenize": lambda: adapter.detokenize(DetokenizeRequest("r", "m", tokens=[74], tenant="acme")),
    }

    async def go() -> None:
        gate = threading.Event()
        holder = asyncio.ensure_future(work.run("other", lambda: gate.wait(10)))
        while work.running == 0:
            await asyncio.sleep(0.001)
        queued = asyncio.ensure_future(requests[call]())
        while work.waiting() == 0:
            await asyncio.sleep(0.001)
        assert work.waiting("acme") == 1  # queued as the tenant's
        gate.set()
        await asyncio.gather(holder, queued)

    run(go())
