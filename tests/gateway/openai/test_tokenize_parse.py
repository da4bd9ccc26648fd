"""gateway/openai/tokenize.py's readers: each refusal's message and parameter, and what a
read request carries (the call and the stand-in routing reads: the request id, the
model, the prompt or messages, the tools the token bound counts)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from adapters.base import Usage
from adapters.errors import GatewayError
from adapters.oneshot import DetokenizeResult, TokenizeResult
from gateway.openai.requests import ROLES
from gateway.openai.tokenize import (
    TOKEN_ID_MAX,
    detokenize_route,
    parse_detokenize,
    parse_tokenize,
    tokenize_payload,
    tokenize_route,
)
from policies.auth import Principal


def refused(parse, body: dict[str, Any]) -> GatewayError:
    with pytest.raises(GatewayError) as exc:
        parse(body, "rid")
    assert exc.value.status == 400
    return exc.value


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        (
            {"prompt": "x", "chat_template": "{{x}}"},
            "A request's own 'chat_template' is not accepted.",
            "chat_template",
        ),
        (
            {"prompt": "x", "messages": [{"role": "user", "content": "x"}]},
            "Send either 'prompt' or 'messages', not both.",
            "prompt",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "continue_final_message": True},
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            "continue_final_message",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]},
            "'chat_template_kwargs' must be an object.",
            "chat_template_kwargs",
        ),
        ({"prompt": 3}, "'prompt' (a string) or 'messages' (an array) is required.", "prompt"),
        ({}, "'prompt' (a string) or 'messages' (an array) is required.", "prompt"),
        ({"messages": []}, "'messages' must be a non-empty array.", "messages"),
        ({"messages": "hi"}, "'messages' must be a non-empty array.", "messages"),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "robot"}]},
            f"'messages[1]' must be an object with a role among {sorted(ROLES)}.",
            "messages[1]",
        ),
        (
            {"messages": [{"role": "user", "content": 5}]},
            "'messages[0].content' must be a string or an array of content parts.",
            "messages[0].content",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "tools": {}},
            "'tools' must be an array of objects.",
            "tools",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "tools": [1]},
            "'tools' must be an array of objects.",
            "tools",
        ),
    ],
)
def test_each_refusal_of_tokenize_says_what_and_where(body, message, param) -> None:
    e = refused(parse_tokenize, {"model": "m", **body})
    assert (e.message, e.param) == (message, param)


def test_a_prompt_is_read_with_its_ids_and_model() -> None:
    intent = parse_tokenize({"model": "m1", "prompt": "hello"}, "rid-1")
    call, [stand_in] = intent.payload, intent.requests
    assert (call.request_id, call.model, call.prompt) == ("rid-1", "m1", "hello")
    assert (stand_in.request_id, stand_in.model, stand_in.prompt, stand_in.tools) == ("rid-1", "m1", "hello", None)


def test_messages_and_tools_are_read_and_the_tools_counted() -> None:
    tools = [{"type": "function", "function": {"name": "f" * 400}}]
    body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    intent = parse_tokenize(body, "rid-2")
    call, [stand_in] = intent.payload, intent.requests
    assert (call.request_id, call.model, call.tools) == ("rid-2", "m1", tools)
    assert (stand_in.request_id, stand_in.model, stand_in.messages, stand_in.tools) == (
        "rid-2",
        "m1",
        body["messages"],
        tools,
    )
    without = parse_tokenize({**body, "tools": None}, "rid-3")
    assert intent.prompt_estimate > without.prompt_estimate  # the tools' text is in the bound


@pytest.mark.parametrize("tokens", [[-1], [TOKEN_ID_MAX + 1], [True], ["1"], "12", None])
def test_detokenize_takes_only_non_negative_token_ids(tokens) -> None:
    e = refused(parse_detokenize, {"model": "m", "tokens": tokens})
    assert (e.message, e.param) == ("'tokens' must be an array of non-negative token ids.", "tokens")


def test_detokenize_reads_its_tokens_ids_and_model() -> None:
    intent = parse_detokenize({"model": "m2", "tokens": [0, TOKEN_ID_MAX]}, "rid-4")
    call, [stand_in] = intent.payload, intent.requests
    assert (call.request_id, call.model, call.tokens) == ("rid-4", "m2", [0, TOKEN_ID_MAX])
    assert (stand_in.request_id, stand_in.model, stand_in.prompt) == ("rid-4", "m2", [0, TOKEN_ID_MAX])


def test_the_answer_is_vllm_s_shape_with_the_count() -> None:
    result = TokenizeResult(tokens=[5, 6, 7], max_model_len=4096, token_strs=["a", "b", "c"])
    assert tokenize_payload(result) == {
        "count": 3,
        "max_model_len": 4096,
        "tokens": [5, 6, 7],
        "token_strs": ["a", "b", "c"],
    }
    assert tokenize_payload(TokenizeResult(tokens=[], max_model_len=8))["token_strs"] is None


# ---- the routes' answers (serve, with the call it makes captured) --------------------------


class Adapter:
    name = "b1"

    def __init__(self) -> None:
        self.asked: list = []

    async def tokenize(self, request):
        self.asked.append(request)
        return TokenizeResult(tokens=[1, 2, 3, 4], max_model_len=64)

    async def detokenize(self, request):
        self.asked.append(request)
        return DetokenizeResult(prompt="hello")


def served(route_of, parse, body: dict[str, Any]):
    intent = parse({"model": "m", **body}, "rid")
    made: list[tuple] = []
    route = route_of(lambda admitted, invoke, answer: made.append((admitted, invoke, answer)))
    admitted = SimpleNamespace(intent=intent, ctx=SimpleNamespace(tenant="t1"))
    assert route.serve(admitted) is None  # what the call made (here, nothing)
    [(given, invoke, answer)] = made
    assert given is admitted
    return intent, invoke, answer


async def test_tokenize_answers_the_tokens_and_charges_their_count() -> None:
    _, invoke, answer = served(tokenize_route, parse_tokenize, {"prompt": "hello there"})
    adapter = Adapter()
    body, usage = answer(await invoke(adapter))
    assert body["count"] == 4 and usage == Usage(4, 0) and adapter.asked[0].tenant == "t1"


async def test_detokenize_answers_the_text_and_charges_the_tokens_sent() -> None:
    intent, invoke, answer = served(detokenize_route, parse_detokenize, {"tokens": [5, 6, 7]})
    adapter = Adapter()
    body, usage = answer(await invoke(adapter))
    assert body == {"prompt": "hello"} and adapter.asked[0].tenant == "t1"
    assert usage == Usage(intent.prompt_estimate, 0) and intent.prompt_estimate == 3


async def test_the_routes_are_named_need_tokenize_and_read_with_their_parser() -> None:
    who = Principal("a", None, ["*"], 1)
    for route_of, name, body in (
        (tokenize_route, "tokenize", {"model": "m", "prompt": "x"}),
        (detokenize_route, "detokenize", {"model": "m", "tokens": [1]}),
    ):
        route = route_of(lambda *args: None)
        assert route.operation == name and route.capability == ("tokenize", f"{name} (/{name})")
        intent = await route.parse(body, "rid-8", who)
        assert intent.payload.request_id == "rid-8" and intent.payload.model == "m"


async def test_detokenizing_no_tokens_charges_none() -> None:
    _, invoke, answer = served(detokenize_route, parse_detokenize, {"tokens": []})
    _, usage = answer(await invoke(Adapter()))
    assert usage == Usage(0, 0)
