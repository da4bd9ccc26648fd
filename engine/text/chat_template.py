"""Render a model's chat template (tokenizer_config.json `chat_template`) with jinja2.

The environment mirrors what transformers' `apply_chat_template` gives templates
(trim_blocks, lstrip_blocks, loop controls, a `tojson` that keeps non-ASCII and
does not HTML-escape, `raise_exception`, `strftime_now`), so a checkpoint's
template renders here exactly as it does in transformers and vLLM.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The messages cannot be rendered (bad shape, or the template refused them)."""


def _tojson(
    value: Any,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
) -> str:
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"the model's chat template does not compile: {exc}") from exc


def content_text(content: Any, where: str) -> str:
    """OpenAI message content (a string, null, or a list of parts) as one string.

    Text parts are joined with newlines, as vLLM does for text-only models; other
    part types cannot be given to a text model.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ChatTemplateError(f"{where}: content part of type {kind!r} is not supported by a text model")
            text = part.get("text")
            if not isinstance(text, str):
                raise ChatTemplateError(f"{where}: a text content part needs a string `text`")
            texts.append(text)
        return "\n".join(texts)
    raise ChatTemplateError(f"{where}: content must be a string, null or a list of content parts")


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of `messages` with string content, ready for any template."""
    if not isinstance(messages, list) or not messages:
        raise ChatTemplateError("messages must be a non-empty list")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ChatTemplateError(f"messages[{i}] must be an object with a string `role`")
        copy = dict(message)
        copy["content"] = content_text(message.get("content"), f"messages[{i}]")
        if message.get("tool_calls") is not None and not isinstance(message["tool_calls"], list):
            raise ChatTemplateError(f"messages[{i}].tool_calls must be a list")
        out.append(copy)
    return out


def render_chat(
    template: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    special_tokens: dict[str, str | None] | None = None,
    **kwargs: Any,
) -> str:
    """The prompt text for `messages` (and `tools`), as the template writes it.

    `special_tokens` (bos_token, eos_token, ...) are template variables, as in
    transformers; extra keyword arguments are passed through to the template.
    """
    compiled = _compile(template)
    try:
        return compiled.render(
            messages=normalize_messages(messages),
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            **(special_tokens or {}),
            **kwargs,
        )
    except ChatTemplateError:
        raise
    except (jinja2.TemplateError, TypeError, KeyError, AttributeError) as exc:
        raise ChatTemplateError(f"the chat template cannot render these messages: {exc}") from exc
