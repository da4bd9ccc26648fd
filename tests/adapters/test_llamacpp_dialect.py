"""LlamaCppDialect bytes in, bodies or events out, without a network (the adapter's
replay tests, tests/adapters/test_llamacpp_adapter.py, show the same on the wire):
the body rules, the forced tool call, logprobs in llama.cpp's shapes, its conditions
read once, and the one-shot calls."""

from __future__ import annotations

import logging

import pytest

from adapters.base import GenerationRequest, LogprobsDelta, SamplingParams, TextDelta, TokenLogprob, TopLogprob
from adapters.errors import GatewayError
from adapters.llamacpp import (
    CALL_CLOSER,
    CALL_OPENER,
    COMPLETION_DEFAULT_MAX_TOKENS,
    LOGPROB_FLOOR,
    LlamaCppDialect,
    TopLogprobsCut,
    empty_arguments_as_object,
    legacy_logprobs,
)
from adapters.llamacpp_load import Props
from adapters.oneshot import DetokenizeRequest, TokenizeRequest

TOOLS = [
    {"type": "function", "function": {"name": "a", "parameters": {}}},
    {"type": "function", "function": {"name": "b", "parameters": {}}},
]
HERMES = Props(n_ctx=4096, slots=1, build="b1", tools=True, hermes_calls=True)


def dialect(**options) -> LlamaCppDialect:
    return LlamaCppDialect("lc", "served", options)


def chat(**kw) -> GenerationRequest:
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return GenerationRequest(request_id="r", model="m", **kw)


def completion(**kw) -> GenerationRequest:
    return GenerationRequest(request_id="r", model="m", kind="completion", prompt="hi", **kw)


def test_capabilities_follow_the_server_s_flags():
    caps = dialect().capabilities
    assert (caps.tools, caps.n, caps.cached_tokens, caps.embeddings, caps.tokenize) == (True, False, True, False, True)
    assert dialect(jinja=False).capabilities.tools is False
    assert dialect(tools=False).capabilities.tools is False
    assert dialect(embeddings=True).capabilities.embeddings is True


def test_the_body_in_llamacpp_s_words():
    body = dialect().body(chat(sampling=SamplingParams(n=3, repetition_penalty=1.2)), False)
    assert "n" not in body and "repetition_penalty" not in body and body["repeat_penalty"] == 1.2
    assert "max_tokens" not in body and "top_logprobs" not in body and "logprobs" not in body or body["logprobs"]
    plain = dialect().body(chat(), True)
    assert "repeat_penalty" not in plain
    assert (body["model"], body["stream"], plain["stream"]) == ("served", False, True)


def test_legacy_completions_stop_at_16_tokens_unless_told():
    assert dialect().body(completion(), False)["max_tokens"] == COMPLETION_DEFAULT_MAX_TOKENS == 16
    assert dialect().body(completion(sampling=SamplingParams(max_tokens=3)), False)["max_tokens"] == 3
    assert "max_tokens" not in dialect().body(chat(), False)


@pytest.mark.parametrize(("asked", "sent"), [(0, 1), (1, 1), (5, 5)])
def test_logprobs_ask_for_at_least_one_top_token(asked, sent):
    s = SamplingParams(logprobs=True, top_logprobs=asked)
    assert dialect().body(chat(sampling=s), False)["top_logprobs"] == sent
    assert dialect().body(completion(sampling=s), False)["logprobs"] == sent
    assert isinstance(dialect().event_filter(chat(sampling=s)), TopLogprobsCut)
    assert dialect().event_filter(chat(sampling=s)).top == asked
    assert dialect().event_filter(chat()) is None


def test_echo_on_completions_is_refused():
    with pytest.raises(GatewayError) as info:
        dialect().body(completion(echo=True), False)
    assert (info.value.status, info.value.param, info.value.code) == (400, "echo", "unsupported_by_backend")
    assert str(info.value).endswith("which does not support echo on /v1/completions.")


def test_earlier_empty_arguments_are_sent_as_an_empty_object():
    call = {"id": "c", "type": "function", "function": {"name": "a", "arguments": " "}}
    kept = {"id": "d", "type": "function", "function": {"name": "b", "arguments": '{"x":1}'}}
    msg = {"role": "assistant", "tool_calls": [call, kept]}
    body = dialect().body(chat(messages=[{"role": "user", "content": "hi"}, msg]), False)
    fixed = body["messages"][1]["tool_calls"]
    assert fixed[0]["function"] == {"name": "a", "arguments": "{}"} and fixed[1] == kept
    assert msg["tool_calls"][0]["function"]["arguments"] == " "  # the request's own message is untouched
    assert empty_arguments_as_object(kept) is kept
    assert empty_arguments_as_object({"role": "user", "content": "x"}) == {"role": "user", "content": "x"}
    odd = {"role": "assistant", "tool_calls": ["junk", {"function": "x"}, {"function": {"arguments": None}}]}
    assert empty_arguments_as_object(odd) is odd


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "b"}}])
def test_a_forced_choice_under_a_hermes_template_opens_the_call_and_ends_after_one(choice):
    d = dialect()
    d.props = HERMES
    body = d.body(chat(tools=TOOLS, tool_choice=choice, sampling=SamplingParams(stop=["END"])), False)
    assert body["messages"][-1] == {"role": "assistant", "content": CALL_OPENER}
    assert body["parallel_tool_calls"] is False and body["stop"] == ["END", CALL_CLOSER]
    assert body["tool_choice"] == "required"
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == (["b"] if isinstance(choice, dict) else ["a", "b"])


def test_a_named_choice_without_a_hermes_template_is_required_over_that_tool_only():
    d = dialect()
    d.props = Props(n_ctx=1, slots=1, build="b", tools=True, hermes_calls=False)
    body = d.body(chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "a"}}), False)
    assert body["tool_choice"] == "required" and [t["function"]["name"] for t in body["tools"]] == ["a"]
    assert body["messages"][-1]["role"] == "user" and body["parallel_tool_calls"] is True
    unknown = dialect().body(chat(tools=TOOLS, tool_choice={"type": "function"}), False)
    assert unknown["tools"] == [] and unknown["tool_choice"] == "required"


def test_no_opener_over_the_client_s_own_prefill_nor_for_an_unforced_choice():
    d = dialect()
    d.props = HERMES
    prefill = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}]
    body = d.body(chat(messages=prefill, tools=TOOLS, tool_choice="required"), False)
    assert (
        body["messages"] == prefill and body["parallel_tool_calls"] is True and CALL_CLOSER not in body.get("stop", [])
    )
    for choice in (None, "auto", "none"):
        body = d.body(chat(tools=TOOLS, tool_choice=choice), False)
        assert body["messages"] == [{"role": "user", "content": "hi"}]
    # a forced choice with no tools at all is left as sent
    assert d.body(chat(tool_choice="required"), False)["messages"] == [{"role": "user", "content": "hi"}]


def test_completion_logprobs_are_read_from_the_chat_shape():
    payload = {
        "choices": [
            {
                "logprobs": {
                    "content": [
                        {
                            "token": "a",
                            "logprob": -0.5,
                            "top_logprobs": [{"token": "a", "logprob": -0.5}, {"token": "b"}],
                        },
                        "junk",
                        {"logprob": -1.0},
                    ]
                }
            },
            {"logprobs": {"tokens": ["x"]}},
            {"logprobs": None},
            "junk",
        ]
    }
    legacy_logprobs(payload)
    assert payload["choices"][0]["logprobs"] == {
        "tokens": ["a", ""],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{"a": -0.5, "b": LOGPROB_FLOOR}, {}],
    }
    assert payload["choices"][1]["logprobs"] == {"tokens": ["x"]}
    legacy_logprobs({})  # no choices: nothing to do


def test_completion_answers_and_chunks_go_through_the_legacy_shape():
    lp = {"content": [{"token": "hi", "logprob": -0.25, "top_logprobs": []}]}
    whole = {"choices": [{"index": 0, "text": "hi", "finish_reason": "stop", "logprobs": lp}]}
    events = dialect().decode_response(whole, chat=False)
    text = [e for e in events if isinstance(e, TextDelta)]
    assert text[0].logprobs[0].token == "hi" and text[0].logprobs[0].logprob == -0.25
    chunk = {"choices": [{"index": 0, "text": "hi", "finish_reason": None, "logprobs": lp}]}
    (delta,) = [e for e in dialect().decode_chunk(chunk, chat=False) if isinstance(e, TextDelta)]
    assert delta.logprobs[0].logprob == -0.25
    chat_chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None, "logprobs": lp}]}
    (chat_delta,) = [e for e in dialect().decode_chunk(chat_chunk, chat=True) if isinstance(e, TextDelta)]
    assert chat_delta.logprobs[0].logprob == -0.25


def test_top_logprobs_cut_to_what_was_asked_and_floored():
    item = TokenLogprob("a", -1e30, top=[TopLogprob("a", -1e30), TopLogprob("b", -2.0), TopLogprob("c", -3.0)])
    cut = TopLogprobsCut(2)
    assert cut.feed(TextDelta(0, "a", [item])) == [TextDelta(0, "a", [item])]
    assert item.logprob == LOGPROB_FLOOR == -9999.0
    assert [(t.token, t.logprob) for t in item.top] == [("a", LOGPROB_FLOOR), ("b", -2.0)]
    held = TokenLogprob("x", LOGPROB_FLOOR, top=[TopLogprob("x", -1.0)])
    TopLogprobsCut(0).feed(LogprobsDelta(0, [held]))
    assert held.top == [] and held.logprob == LOGPROB_FLOOR
    echoed = TokenLogprob("p", None)
    TopLogprobsCut(1).feed(TextDelta(0, "p", [echoed]))
    assert echoed.logprob is None
    assert TopLogprobsCut(1).feed(TextDelta(0, "plain")) == [TextDelta(0, "plain")]
    assert TopLogprobsCut(1).at_done() == []


class Props200:
    base_url = "http://lc"

    def __init__(self, payload: bytes = b'{"default_generation_settings": {"n_ctx": 512}, "total_slots": 2}'):
        self.payload = payload
        self.gets: list[str] = []

    async def get(self, path: str, timeout_s: float = 5.0):
        self.gets.append(path)
        if path == "/props":
            return 200, self.payload
        if path == "/metrics":
            return 200, b"llamacpp:requests_processing 1\nllamacpp:requests_deferred 4\n"
        return 404, b""


async def test_props_are_read_once_and_logged(caplog):
    d, http = dialect(), Props200()
    with caplog.at_level(logging.INFO, logger="switchyard.upstream"):
        await d.ready(http)
        await d.ready(http)
    assert http.gets == ["/props"] and d.props is not None and d.props.n_ctx == 512
    assert "backend lc runs llama.cpp build unknown: 2 slots of 512 positions" in caplog.text
    unreadable = dialect()
    await unreadable.ready(Props200(b"[]"))
    assert unreadable.props is None


async def test_load_reads_the_conditions_first_then_the_shared_load():
    d, http = dialect(load_min_interval_s=30), Props200()
    http.base_url = "http://lc-load-test"
    load = await d.load(http)
    assert (load.running, load.waiting) == (1, 4) and http.gets[0] == "/props"
    again = await d.load(http)
    assert again is load and http.gets.count("/metrics") == 1  # within load_min_interval_s


def test_messages_are_rendered_by_apply_template():
    d = dialect()
    req = TokenizeRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
    call = d.render_call(req)
    assert (call.path, call.body) == ("/apply-template", {"messages": req.messages, "add_generation_prompt": True})
    full = TokenizeRequest(
        "r",
        "m",
        messages=req.messages,
        continue_final_message=True,
        tools=TOOLS,
        chat_template_kwargs={"k": 1},
    )
    assert d.render_call(full).body == {
        "messages": req.messages,
        "add_generation_prompt": False,
        "continue_final_message": True,
        "tools": TOOLS,
        "chat_template_kwargs": {"k": 1},
    }
    no_prompt = TokenizeRequest("r", "m", messages=req.messages, add_generation_prompt=False)
    assert d.render_call(no_prompt).body["add_generation_prompt"] is False
    assert d.render_call(TokenizeRequest("r", "m", prompt="text")) is None
    with pytest.raises(GatewayError) as info:
        d.render_call(TokenizeRequest("r", "m", prompt="x", return_token_strs=True))
    assert (info.value.status, info.value.param) == (400, "return_token_strs")


def test_the_rendered_prompt_is_tokenized_with_the_template_s_special_tokens():
    d = dialect()
    req = TokenizeRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
    rendered = d.rendered(req, {"prompt": "<s>hi"})
    assert (rendered.prompt, rendered.messages, rendered.add_special_tokens) == ("<s>hi", None, False)
    call = d.tokenize_call(rendered)
    assert (call.path, call.body) == ("/tokenize", {"content": "<s>hi", "add_special": False, "parse_special": True})
    plain = d.tokenize_call(TokenizeRequest("r", "m", prompt="hi"))
    assert plain.body == {"content": "hi", "add_special": True, "parse_special": True}
    assert d.tokenize_call(TokenizeRequest("r", "m")).body["content"] == ""
    for payload in ({}, {"prompt": 3}, "x"):
        with pytest.raises(GatewayError) as info:
            d.rendered(req, payload)
        assert info.value.status == 502 and str(info.value).endswith("its apply-template answer has the wrong shape")


def test_tokenize_and_detokenize_answers():
    d = dialect()
    req = TokenizeRequest("r", "m", prompt="hi")
    assert d.read_tokenize({"tokens": [1, 2]}, req).max_model_len == 0  # conditions not read yet
    d.props = HERMES
    result = d.read_tokenize({"tokens": [1, 2]}, req)
    assert (result.tokens, result.max_model_len) == ([1, 2], 4096)
    for payload in ({"tokens": [1, True]}, {"tokens": "12"}, [1, 2], {"tokens": [1.5]}):
        with pytest.raises(GatewayError) as info:
            d.read_tokenize(payload, req)
        assert str(info.value).endswith("its tokenize answer has the wrong shape")
    det = DetokenizeRequest("r", "m", [1, 2])
    assert (d.detokenize_call(det).path, d.detokenize_call(det).body) == ("/detokenize", {"tokens": [1, 2]})
    assert d.read_detokenize({"content": "hi"}, det).prompt == "hi"
    for payload in ({"content": 1}, {"prompt": "hi"}, None):
        with pytest.raises(GatewayError) as info:
            d.read_detokenize(payload, det)
        assert str(info.value).endswith("its detokenize answer has the wrong shape")


def test_context_overflow_is_context_length_exceeded():
    for message in ("the request exceeds the available context size", "prompt is larger than the max context size"):
        err = dialect().error(400, {"error": {"message": message.upper(), "code": 400}})
        assert err.code == "context_length_exceeded"


def test_a_failed_finish_is_logged_with_the_backend(caplog):
    chunk = {"choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]}
    whole = {"choices": [{"index": 0, "message": {"content": ""}, "finish_reason": "error"}]}
    with caplog.at_level(logging.WARNING, logger="switchyard.upstream"):
        for decode, payload in ((dialect().decode_chunk, chunk), (dialect().decode_response, whole)):
            with pytest.raises(GatewayError):
                decode(payload, chat=True)
    assert caplog.text.count("backend lc ended a generation with finish_reason 'error'") == 2


def test_a_whole_chat_answer_is_read_as_chat():
    whole = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    assert [e for e in dialect().decode_response(whole, chat=True) if isinstance(e, TextDelta)] == [TextDelta(0, "hi")]


def test_every_choice_s_logprobs_are_converted_and_an_unnamed_top_token_is_the_empty_token():
    lp = {"content": [{"token": "a", "logprob": -0.5, "top_logprobs": [{"logprob": -2.0}]}]}
    payload = {"choices": [{"logprobs": {"tokens": ["x"]}}, {"logprobs": lp}]}
    legacy_logprobs(payload)
    assert payload["choices"][1]["logprobs"]["top_logprobs"] == [{"": -2.0}]


async def test_the_load_interval_option_and_its_default(monkeypatch):
    import adapters.dialect as shared

    http = Props200()
    http.base_url = "http://lc-interval-0"
    every_time = dialect(load_min_interval_s=0)
    await every_time.load(http)
    await every_time.load(http)
    assert http.gets.count("/metrics") == 2  # the option, not the default
    default = Props200()
    default.base_url = "http://lc-interval-default"
    d = dialect()
    first = await d.load(default)
    clock = type("Clock", (), {"time": staticmethod(lambda: first.read_at + 1.0)})
    monkeypatch.setattr(shared, "time", clock)
    await d.load(default)
    assert default.gets.count("/metrics") == 2  # 1 s later: past the 0.5 s default


def test_the_refusal_of_token_strings_says_what():
    with pytest.raises(GatewayError) as info:
        dialect().render_call(TokenizeRequest("r", "m", prompt="x", return_token_strs=True))
    assert "which does not support token strings in /tokenize answers" in str(info.value)


def test_wrong_shapes_are_logged_with_the_backend_and_the_answer_s_start(caplog):
    long = {"x": "y" * 300}
    with caplog.at_level(logging.WARNING, logger="switchyard.upstream"):
        with pytest.raises(GatewayError):
            dialect().rendered(TokenizeRequest("r", "m", messages=[]), long)
        with pytest.raises(GatewayError):
            dialect().read_tokenize(long, TokenizeRequest("r", "m", prompt="x"))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"backend lc failed: its apply-template answer has the wrong shape ({repr(long)[:200]})",
        f"backend lc failed: its tokenize answer has the wrong shape ({repr(long)[:200]})",
    ]


def test_a_forced_call_without_stops_of_its_own_stops_at_the_closer():
    d = dialect()
    d.props = HERMES
    assert d.body(chat(tools=TOOLS, tool_choice="required"), False)["stop"] == [CALL_CLOSER]


def test_a_message_that_is_not_an_object_is_left_as_it_is():
    assert empty_arguments_as_object("junk") == "junk"  # type: ignore[arg-type]


def test_a_wrong_detokenize_answer_is_logged_with_the_backend(caplog):
    long = {"x": "y" * 300}
    with caplog.at_level(logging.WARNING, logger="switchyard.upstream"), pytest.raises(GatewayError):
        dialect().read_detokenize(long, DetokenizeRequest("r", "m", [1]))
    assert [r.getMessage() for r in caplog.records] == [
        f"backend lc failed: its detokenize answer has the wrong shape ({repr(long)[:200]})"
    ]
