"""A Responses `input` -> the canonical item list the gateway stores and converts.

Every accepted input item is rewritten into one of four shapes, each exactly
what `GET /v1/responses/{id}/input_items` returns for it (a fresh `id`, status
`completed`):
- a user/system/developer `message` with `input_text` parts;
- an assistant `message` with `output_text` (or `refusal`) parts;
- a `function_call` (`call_id`, `name`, `arguments`);
- a `function_call_output` (`call_id`, `output`: a string or `input_text` parts).
Anything else (images, files, reasoning items, item references, built-in tool
calls) is refused with a 400 naming the exact path, never dropped.
"""

from __future__ import annotations

from typing import Any

from adapters.errors import invalid_request
from gateway.openai.responses.errors import short, unsupported
from gateway.openai.responses.ids import new_function_call_id, new_function_call_output_id, new_message_id

INPUT_ROLES = ("user", "system", "developer")
SUPPORTED_ITEMS = "message, function_call, function_call_output"


def parse_input(value: Any) -> list[dict[str, Any]]:
    """`input` (a string, an item list, or absent) as canonical items."""
    if value is None:
        return []
    if isinstance(value, str):
        return [_input_message("user", [_input_text(value)])]
    if not isinstance(value, list):
        raise invalid_request("'input' must be a string or an array of input items.", param="input")
    return [_item(raw, f"input[{i}]") for i, raw in enumerate(value)]


def _item(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise invalid_request(f"'{where}' must be an object.", param=where)
    kind = raw.get("type")
    if kind is None and "role" in raw:
        kind = "message"  # the "easy" message form may omit its type
    if kind == "message":
        return _message(raw, where)
    if kind == "function_call":
        return _function_call(raw, where)
    if kind == "function_call_output":
        return _function_call_output(raw, where)
    if kind == "reasoning":
        raise unsupported(f"'{where}': reasoning items are not supported by this gateway.", f"{where}.type")
    if not isinstance(kind, str):
        raise invalid_request(f"'{where}.type' is required and must be a string.", param=f"{where}.type")
    raise unsupported(
        f"'{where}.type' {short(kind)} is not supported by this gateway; supported input items: {SUPPORTED_ITEMS}.",
        f"{where}.type",
    )


def _string(raw: dict, key: str, where: str, *, empty: bool = False) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or (not empty and not value):
        what = "a string" if empty else "a non-empty string"
        raise invalid_request(f"'{where}.{key}' is required and must be {what}.", param=f"{where}.{key}")
    return value


def _message(raw: dict, where: str) -> dict[str, Any]:
    role = raw.get("role")
    if role not in (*INPUT_ROLES, "assistant"):
        raise invalid_request(
            f"'{where}.role' must be one of 'user', 'system', 'developer', 'assistant'; got {short(role)}.",
            param=f"{where}.role",
        )
    content = raw.get("content")
    if isinstance(content, str):
        parts: list[Any] = [{"type": "output_text" if role == "assistant" else "input_text", "text": content}]
    elif isinstance(content, list) and content:
        parts = content
    else:
        raise invalid_request(
            f"'{where}.content' must be a string or a non-empty array of content parts.", param=f"{where}.content"
        )
    if role == "assistant":
        return _assistant_message([_output_part(p, f"{where}.content[{j}]") for j, p in enumerate(parts)])
    return _input_message(role, [_input_part(p, f"{where}.content[{j}]") for j, p in enumerate(parts)])


def _input_part(part: Any, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "input_text":
        return _input_text(_text(part, "text", where))
    return _refuse_part(part, kind, where, "input_text")


def _output_part(part: Any, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("output_text", "input_text"):
        return {"type": "output_text", "text": _text(part, "text", where), "annotations": []}
    if kind == "refusal":
        return {"type": "refusal", "refusal": _text(part, "refusal", where)}
    return _refuse_part(part, kind, where, "output_text or refusal")


def _refuse_part(part: Any, kind: Any, where: str, allowed: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise invalid_request(f"'{where}' must be a content part object.", param=where)
    if kind in ("input_image", "input_file", "input_audio"):
        raise unsupported(f"'{where}': {kind} content is not supported by this gateway (text only).", f"{where}.type")
    raise invalid_request(f"'{where}.type' must be {allowed}; got {short(kind)}.", param=f"{where}.type")


def _text(part: dict, key: str, where: str) -> str:
    text = part.get(key)
    if not isinstance(text, str):
        raise invalid_request(f"'{where}.{key}' must be a string.", param=f"{where}.{key}")
    return text


def _function_call(raw: dict, where: str) -> dict[str, Any]:
    return {
        "id": new_function_call_id(),
        "type": "function_call",
        "call_id": _string(raw, "call_id", where),
        "name": _string(raw, "name", where),
        "arguments": _string(raw, "arguments", where, empty=True),
        "status": "completed",
    }


def _function_call_output(raw: dict, where: str) -> dict[str, Any]:
    output = raw.get("output")
    if isinstance(output, list) and output:
        output = [_input_part(p, f"{where}.output[{j}]") for j, p in enumerate(output)]
    elif not isinstance(output, str):
        raise invalid_request(
            f"'{where}.output' must be a string or a non-empty array of input_text parts.", param=f"{where}.output"
        )
    return {
        "id": new_function_call_output_id(),
        "type": "function_call_output",
        "call_id": _string(raw, "call_id", where),
        "output": output,
        "status": "completed",
    }


def _input_text(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}


def _input_message(role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": new_message_id(), "type": "message", "role": role, "status": "completed", "content": parts}


def _assistant_message(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": new_message_id(), "type": "message", "role": "assistant", "status": "completed", "content": parts}
