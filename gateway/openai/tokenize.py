"""`POST /tokenize` and `POST /detokenize` in vLLM's shape (vLLM's
`entrypoints/serve/tokenize/protocol.py`), for models whose runtime has them
(`Capabilities.tokenize`: vLLM, SGLang, the native engine).

`/tokenize` takes `{"model", "prompt", "add_special_tokens"?, "return_token_strs"?}`
or `{"model", "messages", "add_generation_prompt"? (true), "continue_final_message"?
(false; not with add_generation_prompt), "add_special_tokens"? (false), "tools"?,
"chat_template_kwargs"?, "return_token_strs"?}` and answers `{"count",
"max_model_len", "tokens", "token_strs"}` (`token_strs` null unless asked for).
`/detokenize` takes `{"model", "tokens"}` and answers `{"prompt"}`. A request's own
`chat_template` is refused: a tenant does not run templates of its own on the backend.

Both are authenticated and checked against the tenant's models like any call; they
count one request against the tenant's requests per minute and no tokens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.responses import Response

from adapters.base import Adapter, Usage
from adapters.errors import invalid_request
from adapters.oneshot import DetokenizeRequest, TokenizeRequest, TokenizeResult
from gateway.intake import Admitted, ApiRoute, Intent
from gateway.openai.request_fields import boolean, model_name
from gateway.openai.requests import ROLES
from gateway.serving.oneshot import MakeCall, oneshot_parse, route_request

R = TypeVar("R")  # the adapter's result
TOKEN_ID_MAX = 2**63 - 1
NO_TOKENS = Usage(0, 0)


def parse_tokenize(body: dict[str, Any], request_id: str) -> Intent:
    model = model_name(body)
    if "chat_template" in body:
        raise invalid_request("A request's own 'chat_template' is not accepted.", param="chat_template")
    call = TokenizeRequest(
        request_id=request_id,
        model=model,
        add_special_tokens=boolean(body, "add_special_tokens"),
        return_token_strs=bool(boolean(body, "return_token_strs")),
    )
    if "messages" in body:
        if "prompt" in body:
            raise invalid_request("Send either 'prompt' or 'messages', not both.", param="prompt")
        call.messages = _messages(body.get("messages"))
        generation_prompt = boolean(body, "add_generation_prompt")
        call.continue_final_message = bool(boolean(body, "continue_final_message"))
        call.add_generation_prompt = generation_prompt if generation_prompt is not None else True
        if call.continue_final_message and call.add_generation_prompt:
            raise invalid_request(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                param="continue_final_message",
            )
        call.tools = _objects(body, "tools")
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise invalid_request("'chat_template_kwargs' must be an object.", param="chat_template_kwargs")
        call.chat_template_kwargs = kwargs or {}
        return Intent([route_request(request_id, model, messages=call.messages)], call, 0)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise invalid_request("'prompt' (a string) or 'messages' (an array) is required.", param="prompt")
    call.prompt = prompt
    return Intent([route_request(request_id, model, prompt=prompt)], call, 0)


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise invalid_request("'messages' must be a non-empty array.", param="messages")
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise invalid_request(
                f"'messages[{i}]' must be an object with a role among {sorted(ROLES)}.", param=f"messages[{i}]"
            )
        if m.get("content") is not None and not isinstance(m["content"], (str, list)):
            raise invalid_request(
                f"'messages[{i}].content' must be a string or an array of content parts.",
                param=f"messages[{i}].content",
            )
    return value


def _objects(body: dict[str, Any], name: str) -> list[dict[str, Any]] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise invalid_request(f"'{name}' must be an array of objects.", param=name)
    return value


def parse_detokenize(body: dict[str, Any], request_id: str) -> Intent:
    model = model_name(body)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= TOKEN_ID_MAX for t in tokens
    ):
        raise invalid_request("'tokens' must be an array of non-negative token ids.", param="tokens")
    call = DetokenizeRequest(request_id=request_id, model=model, tokens=tokens)
    return Intent([route_request(request_id, model, prompt=tokens)], call, 0)


def tokenize_payload(result: TokenizeResult) -> dict[str, Any]:
    return {
        "count": len(result.tokens),
        "max_model_len": result.max_model_len,
        "tokens": result.tokens,
        "token_strs": result.token_strs,
    }


def tokenize_route(call: MakeCall) -> ApiRoute:
    """`POST /tokenize`: the front door, then the OneShotCall that answers (no tokens charged)."""
    return _route(call, "tokenize", parse_tokenize, lambda a, c: a.tokenize(c), tokenize_payload)


def detokenize_route(call: MakeCall) -> ApiRoute:
    return _route(call, "detokenize", parse_detokenize, lambda a, c: a.detokenize(c), lambda r: {"prompt": r.prompt})


def _route(
    call: MakeCall,
    name: str,
    parse: Callable[[dict[str, Any], str], Intent],
    method: Callable[[Adapter, Any], Awaitable[R]],
    payload: Callable[[R], dict[str, Any]],
) -> ApiRoute:
    """Either call: a tokenize-capable backend's `method`, answered with `payload` and no tokens."""

    def serve(admitted: Admitted) -> Response:
        request = admitted.intent.payload

        async def invoke(adapter: Adapter) -> R:
            return await method(adapter, request)

        return call(admitted, invoke, lambda result: (payload(result), NO_TOKENS))

    return ApiRoute(name, oneshot_parse(parse), serve, ("tokenize", f"{name} (/{name})"))
