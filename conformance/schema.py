"""Strict shape validators for OpenAI JSON bodies and stream chunks.

Written from the spec facts (openai-openapi 2.3.0), not from the SDK's models,
so this oracle is independent of the official client's. Each validator returns
a list of `FieldIssue`s (empty when the object conforms); "key present" and
"not null" are checked separately because the spec distinguishes a required
nullable key (`content`, `refusal`, `logprobs`) from an optional one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

CHAT_FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "function_call")
COMPLETION_FINISH_REASONS = ("stop", "length", "content_filter")
DELTA_ROLES = ("developer", "system", "user", "assistant", "tool")


@dataclass(slots=True)
class FieldIssue:
    path: str
    expected: str
    seen: str

    def __str__(self) -> str:
        return f"{self.path}: expected {self.expected}, seen {self.seen}"


def show(value: Any, limit: int = 120) -> str:
    text = "<absent>" if value is _ABSENT else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_ABSENT = object()


class _Checker:
    def __init__(self) -> None:
        self.issues: list[FieldIssue] = []

    def bad(self, path: str, expected: str, seen: Any) -> None:
        self.issues.append(FieldIssue(path, expected, show(seen)))

    def get(self, obj: dict[str, Any], key: str) -> Any:
        return obj.get(key, _ABSENT) if isinstance(obj, dict) else _ABSENT

    def obj(self, value: Any, path: str, *, nullable: bool = False) -> bool:
        if value is None and nullable:
            return False
        if not isinstance(value, dict):
            self.bad(path, "an object" + (" or null" if nullable else ""), value)
            return False
        return True

    def string(self, value: Any, path: str, *, nullable: bool = False, nonempty: bool = False) -> None:
        if value is None and nullable:
            return
        if not isinstance(value, str):
            self.bad(path, "a string" + (" or null" if nullable else ""), value)
        elif nonempty and not value:
            self.bad(path, "a non-empty string", value)

    def integer(self, value: Any, path: str, *, minimum: int | None = None, nullable: bool = False) -> None:
        if value is None and nullable:
            return
        if not isinstance(value, int) or isinstance(value, bool):
            self.bad(path, "an integer" + (" or null" if nullable else ""), value)
        elif minimum is not None and value < minimum:
            self.bad(path, f"an integer >= {minimum}", value)

    def number(self, value: Any, path: str) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            self.bad(path, "a number", value)

    def enum(self, value: Any, path: str, allowed: tuple[str, ...], *, nullable: bool = False) -> None:
        if value is None and nullable:
            return
        if value not in allowed:
            self.bad(path, "one of " + "|".join(allowed) + (" or null" if nullable else ""), value)

    def present(self, obj: dict[str, Any], key: str, path: str) -> Any:
        value = self.get(obj, key)
        if value is _ABSENT:
            self.bad(path, "a required key", _ABSENT)
        return value

    def string_key(
        self,
        obj: dict[str, Any],
        key: str,
        path: str,
        *,
        required: bool,
        nullable: bool = False,
        nonempty: bool = False,
    ) -> None:
        """A string under `key`, when there: a missing required key is one issue, not two."""
        value = self.present(obj, key, path) if required else self.get(obj, key)
        if value is not _ABSENT:
            self.string(value, path, nullable=nullable, nonempty=nonempty)

    def constant(self, obj: dict[str, Any], key: str, path: str, wanted: str) -> None:
        """A required key whose value is fixed (`object`, a tool call's `type`)."""
        value = self.present(obj, key, path)
        if value is not _ABSENT and value != wanted:
            self.bad(path, repr(wanted), value)

    def array(
        self,
        value: Any,
        path: str,
        item: Callable[[Any, str], None],
        *,
        null_ok: bool = True,
        expected: str = "an array",
    ) -> None:
        """An array judged item by item (`item(value, path)`); absent, or null
        where `null_ok`, is no issue."""
        if value is _ABSENT or (value is None and null_ok):
            return
        if not isinstance(value, list):
            self.bad(path, expected, value)
            return
        for j, entry in enumerate(value):
            item(entry, f"{path}[{j}]")


def _usage(c: _Checker, usage: Any, path: str) -> None:
    if not c.obj(usage, path):
        return
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        c.integer(c.present(usage, key, f"{path}.{key}"), f"{path}.{key}", minimum=0)
    for details in ("prompt_tokens_details", "completion_tokens_details"):
        value = c.get(usage, details)
        if value is _ABSENT or value is None:
            continue
        if c.obj(value, f"{path}.{details}"):
            for k, v in value.items():
                if v is not None and not isinstance(v, dict):
                    c.integer(v, f"{path}.{details}.{k}", minimum=0)


def usage_issues(usage: Any, path: str = "usage") -> list[FieldIssue]:
    c = _Checker()
    _usage(c, usage, path)
    return c.issues


def _envelope_head(c: _Checker, body: Any, object_name: str) -> list[Any]:
    if not c.obj(body, "$"):
        return []
    c.string(c.present(body, "id", "id"), "id", nonempty=True)
    c.constant(body, "object", "object", object_name)
    c.integer(c.present(body, "created", "created"), "created", minimum=0)
    c.string(c.present(body, "model", "model"), "model", nonempty=True)
    choices = c.present(body, "choices", "choices")
    if choices is _ABSENT:
        return []
    if not isinstance(choices, list):
        c.bad("choices", "an array", choices)
        return []
    return choices


def _choices(c: _Checker, body: Any, object_name: str) -> Iterator[tuple[dict[str, Any], str]]:
    """Each choice that is an object, with its path, after the envelope's own fields."""
    for i, choice in enumerate(_envelope_head(c, body, object_name)):
        p = f"choices[{i}]"
        if c.obj(choice, p):
            yield choice, p


def _choice_head(
    c: _Checker,
    choice: dict[str, Any],
    p: str,
    finish_reasons: tuple[str, ...],
    *,
    finish_nullable: bool,
    text: bool = False,
) -> None:
    """index and finish_reason, which every kind of choice has (with `text`, the
    legacy completion's text between them)."""
    c.integer(c.present(choice, "index", f"{p}.index"), f"{p}.index", minimum=0)
    if text:
        c.string(c.present(choice, "text", f"{p}.text"), f"{p}.text")
    c.enum(
        c.present(choice, "finish_reason", f"{p}.finish_reason"),
        f"{p}.finish_reason",
        finish_reasons,
        nullable=finish_nullable,
    )


def _tool_call(c: _Checker, call: Any, path: str) -> None:
    if not c.obj(call, path):
        return
    c.string(c.present(call, "id", f"{path}.id"), f"{path}.id", nonempty=True)
    c.constant(call, "type", f"{path}.type", "function")
    fn = c.present(call, "function", f"{path}.function")
    if fn is not _ABSENT and c.obj(fn, f"{path}.function"):
        c.string(c.present(fn, "name", f"{path}.function.name"), f"{path}.function.name", nonempty=True)
        c.string(c.present(fn, "arguments", f"{path}.function.arguments"), f"{path}.function.arguments")


def _token_logprob(c: _Checker, entry: Any, path: str, *, top: bool) -> None:
    if not c.obj(entry, path):
        return
    c.string(c.present(entry, "token", f"{path}.token"), f"{path}.token")
    lp = c.present(entry, "logprob", f"{path}.logprob")
    if lp is not _ABSENT:
        c.number(lp, f"{path}.logprob")
        if isinstance(lp, (int, float)) and lp > 0:
            c.bad(f"{path}.logprob", "a log probability <= 0", lp)
    b = c.present(entry, "bytes", f"{path}.bytes")
    if b is not _ABSENT and b is not None and not (isinstance(b, list) and all(isinstance(x, int) for x in b)):
        c.bad(f"{path}.bytes", "an array of integers or null", b)
    if top:
        c.array(
            c.present(entry, "top_logprobs", f"{path}.top_logprobs"),
            f"{path}.top_logprobs",
            lambda t, p: _token_logprob(c, t, p, top=False),
            null_ok=False,
        )


def _chat_logprobs(c: _Checker, logprobs: Any, path: str) -> None:
    if logprobs is None or logprobs is _ABSENT:
        return
    if not c.obj(logprobs, path):
        return
    c.array(
        c.get(logprobs, "content"),
        f"{path}.content",
        lambda entry, p: _token_logprob(c, entry, p, top=True),
        expected="an array or null",
    )


def chat_completion_issues(body: Any) -> list[FieldIssue]:
    """`CreateChatCompletionResponse` (non-stream)."""
    c = _Checker()
    for choice, p in _choices(c, body, "chat.completion"):
        _choice_head(c, choice, p, CHAT_FINISH_REASONS, finish_nullable=False)
        _chat_logprobs(c, c.present(choice, "logprobs", f"{p}.logprobs"), f"{p}.logprobs")
        message = c.present(choice, "message", f"{p}.message")
        if message is _ABSENT or not c.obj(message, f"{p}.message"):
            continue
        m = f"{p}.message"
        role = c.present(message, "role", f"{m}.role")
        if role is not _ABSENT and role != "assistant":
            c.bad(f"{m}.role", "'assistant'", role)
        for key in ("content", "refusal"):
            c.string_key(message, key, f"{m}.{key}", required=True, nullable=True)
        c.array(c.get(message, "tool_calls"), f"{m}.tool_calls", lambda call, p: _tool_call(c, call, p))
    if isinstance(body, dict) and c.get(body, "usage") not in (_ABSENT, None):
        _usage(c, body["usage"], "usage")
    return c.issues


def _tool_call_chunk(c: _Checker, call: Any, path: str) -> None:
    if not c.obj(call, path):
        return
    c.integer(c.present(call, "index", f"{path}.index"), f"{path}.index", minimum=0)
    # Optional keys, but not nullable in the spec: a `null` id or name is a deviation.
    c.string_key(call, "id", f"{path}.id", required=False, nonempty=True)
    type_ = c.get(call, "type")
    if type_ is not _ABSENT and type_ != "function":
        c.bad(f"{path}.type", "'function'", type_)
    fn = c.get(call, "function")
    if fn is not _ABSENT and c.obj(fn, f"{path}.function"):
        for key in ("name", "arguments"):
            c.string_key(fn, key, f"{path}.function.{key}", required=False)


def chat_chunk_issues(chunk: Any) -> list[FieldIssue]:
    """`CreateChatCompletionStreamResponse` (one SSE payload)."""
    c = _Checker()
    for choice, p in _choices(c, chunk, "chat.completion.chunk"):
        _choice_head(c, choice, p, CHAT_FINISH_REASONS, finish_nullable=True)
        _chat_logprobs(c, c.get(choice, "logprobs"), f"{p}.logprobs")
        delta = c.present(choice, "delta", f"{p}.delta")
        if delta is _ABSENT or not c.obj(delta, f"{p}.delta"):
            continue
        d = f"{p}.delta"
        role = c.get(delta, "role")
        if role is not _ABSENT:
            c.enum(role, f"{d}.role", DELTA_ROLES)
        for key in ("content", "refusal"):
            c.string_key(delta, key, f"{d}.{key}", required=False, nullable=True)
        c.array(c.get(delta, "tool_calls"), f"{d}.tool_calls", lambda call, p: _tool_call_chunk(c, call, p))
    if isinstance(chunk, dict):
        usage = c.get(chunk, "usage")
        if usage not in (_ABSENT, None):
            _usage(c, usage, "usage")
    return c.issues


def completion_issues(body: Any, *, stream: bool) -> list[FieldIssue]:
    """`CreateCompletionResponse` (legacy); stream chunks share the shape but
    `finish_reason` is null until the last chunk."""
    c = _Checker()
    for choice, p in _choices(c, body, "text_completion"):
        _choice_head(c, choice, p, COMPLETION_FINISH_REASONS, finish_nullable=stream, text=True)
        lp = c.present(choice, "logprobs", f"{p}.logprobs")
        if lp not in (_ABSENT, None) and c.obj(lp, f"{p}.logprobs"):
            for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                value = c.get(lp, key)
                if value is not _ABSENT and value is not None and not isinstance(value, list):
                    c.bad(f"{p}.logprobs.{key}", "an array", value)
    if isinstance(body, dict) and c.get(body, "usage") not in (_ABSENT, None):
        _usage(c, body["usage"], "usage")
    return c.issues


def model_issues(model: Any, path: str = "$") -> list[FieldIssue]:
    c = _Checker()
    if c.obj(model, path):
        c.string(c.present(model, "id", f"{path}.id"), f"{path}.id", nonempty=True)
        c.constant(model, "object", f"{path}.object", "model")
        c.integer(c.present(model, "created", f"{path}.created"), f"{path}.created", minimum=0)
        c.string(c.present(model, "owned_by", f"{path}.owned_by"), f"{path}.owned_by")
    return c.issues


def model_list_issues(body: Any) -> list[FieldIssue]:
    c = _Checker()
    if not c.obj(body, "$"):
        return c.issues
    c.constant(body, "object", "object", "list")
    data = c.present(body, "data", "data")
    if data is _ABSENT:
        return c.issues
    if not isinstance(data, list):
        c.bad("data", "an array", data)
        return c.issues
    if not data:
        c.bad("data", "at least one model", data)
    issues = c.issues
    for i, model in enumerate(data):
        issues.extend(model_issues(model, f"data[{i}]"))
    return issues


def error_envelope_issues(body: Any) -> list[FieldIssue]:
    """`{"error": {"message": str, "type": str, "param": str|null, "code": str|null}}`:
    all four keys required; `param` and `code` may be null."""
    c = _Checker()
    if not c.obj(body, "$"):
        return c.issues
    err = c.present(body, "error", "error")
    if err is _ABSENT or not c.obj(err, "error"):
        return c.issues
    c.string(c.present(err, "message", "error.message"), "error.message", nonempty=True)
    c.string(c.present(err, "type", "error.type"), "error.type")
    for key in ("param", "code"):
        c.string_key(err, key, f"error.{key}", required=True, nullable=True)
    return c.issues
