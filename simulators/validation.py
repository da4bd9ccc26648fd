"""Type and range checks every runtime applies to the standard OpenAI request fields
(pydantic models in vLLM, SGLang and TRT-LLM, serde structs in TGI). Each runtime
module turns the problems found here into its own validation-error shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Problem:
    loc: str  # dotted field path, e.g. "messages.0.role"
    kind: str  # pydantic-style error type: "int_type", "missing", "greater_than_equal", ...
    message: str
    value: Any

    def as_pydantic(self) -> dict[str, Any]:
        loc = ("body", *(int(p) if p.isdigit() else p for p in self.loc.split(".")))
        return {"type": self.kind, "loc": loc, "msg": self.message, "input": self.value}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_NUMBER_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_INT_FIELDS = ("max_tokens", "max_completion_tokens", "n", "seed")


def check_body(body: dict[str, Any], kind: str) -> list[Problem]:
    problems: list[Problem] = []
    if kind == "chat":
        messages = body.get("messages")
        if isinstance(messages, list):
            for i, message in enumerate(messages):
                if not isinstance(message, dict):
                    problems.append(
                        Problem(f"messages.{i}", "dict_type", "Input should be a valid dictionary", message)
                    )
                elif not isinstance(message.get("role"), str):
                    problems.append(
                        Problem(
                            f"messages.{i}.role",
                            "missing" if "role" not in message else "string_type",
                            "Field required" if "role" not in message else "Input should be a valid string",
                            message.get("role"),
                        )
                    )
                elif message.get("content") is not None and not isinstance(message["content"], (str, list)):
                    problems.append(
                        Problem(
                            f"messages.{i}.content", "string_type", "Input should be a valid string", message["content"]
                        )
                    )
    else:
        prompt = body.get("prompt")
        if prompt is not None and not _valid_prompt(prompt):
            problems.append(Problem("prompt", "string_type", "Input should be a valid string", prompt))
    for name in _INT_FIELDS:
        value = body.get(name)
        if value is not None and not _is_int(value):
            problems.append(Problem(name, "int_type", "Input should be a valid integer", value))
    for name in _NUMBER_FIELDS:
        value = body.get(name)
        if value is not None and not _is_number(value):
            problems.append(Problem(name, "float_type", "Input should be a valid number", value))
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        problems.append(Problem("stream", "bool_type", "Input should be a valid boolean", body["stream"]))
    stop = body.get("stop")
    if stop is not None and not (
        isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        problems.append(Problem("stop", "string_type", "Input should be a valid string", stop))
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        problems.append(Problem("tools", "list_type", "Input should be a valid list", tools))
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        problems.append(Problem("stream_options", "model_type", "Input should be a valid dictionary", options))
    for name in ("max_tokens", "max_completion_tokens", "n"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            problems.append(Problem(name, "greater_than_equal", "Input should be greater than or equal to 1", value))
    return problems


def _valid_prompt(prompt: Any) -> bool:
    if isinstance(prompt, str):
        return True
    if isinstance(prompt, list) and prompt:
        return (
            all(isinstance(p, str) for p in prompt)
            or all(_is_int(p) for p in prompt)
            or all(isinstance(p, list) and all(_is_int(t) for t in p) for p in prompt)
        )
    return False


def pydantic_text(problems: list[Problem], model: str | None = None) -> str:
    """`str(ValidationError)`-like text: a count line, then one entry per problem."""
    head = f"{len(problems)} validation error{'s' if len(problems) != 1 else ''}"
    head += f" for {model}" if model else ":"
    lines = [head]
    for p in problems:
        lines.append(f"{p.loc}\n  {p.message} [type={p.kind}, input_value={p.value!r}]")
    return "\n".join(lines)
