"""What one answer of a model under rollout said, as the rollout judges it: finish
reasons, tool calls' validity, structured output's validity, the time between output
events. Fed the events the client gets (after the stream guard), only for models
under rollout (docs/architecture.md, "Rollouts on the request path": "Records").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from adapters.base import Event, Finish, GenerationRequest, TextDelta, ToolCallDelta


@dataclass
class ToolCall:
    name: str | None = None
    arguments: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """Named, and its arguments one JSON object (OpenAI's shape for a call's arguments)."""
        return bool(self.name) and isinstance(_json("".join(self.arguments)), dict)


class AnswerCheck:
    """The tally of one answer (choice 0 is the one compared by the mirror)."""

    def __init__(self, req: GenerationRequest) -> None:
        self.req = req
        fmt = req.response_format or {}
        self.structured = fmt.get("type") in ("json_object", "json_schema")
        self.schema: dict[str, Any] | None = (fmt.get("json_schema") or {}).get("schema") if self.structured else None
        self.calls: dict[tuple[int, int], ToolCall] = {}
        self.texts: dict[int, list[str]] = {}
        self.finishes: dict[int, str] = {}
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.gaps = 0

    def saw(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._content()
            if self.structured:
                self.texts.setdefault(event.index, []).append(event.text)
        elif isinstance(event, ToolCallDelta):
            self._content()
            call = self.calls.setdefault((event.index, event.tool_index), ToolCall())
            if event.name:
                call.name = event.name
            call.arguments.append(event.arguments)
        elif isinstance(event, Finish):
            self.finishes[event.index] = event.reason

    def _content(self) -> None:
        now = time.perf_counter()
        if self.first_at is None:
            self.first_at = now
        else:
            self.gaps += 1
        self.last_at = now

    @property
    def itl_s(self) -> float | None:
        """The mean gap between output events after the first (None: fewer than two, or a
        whole answer, whose events all come at once)."""
        if not self.req.stream or not self.gaps or self.first_at is None or self.last_at is None:
            return None
        return (self.last_at - self.first_at) / self.gaps

    @property
    def finish_reason(self) -> str | None:
        return self.finishes.get(0)

    def call_names(self, choice: int = 0) -> list[str | None]:
        return [c.name for (i, _), c in sorted(self.calls.items()) if i == choice]

    @property
    def tool_calls_valid(self) -> bool | None:
        """Every call valid; no call where the request forced one is invalid too. None
        when tools were not offered, or offered and not forced and none was made."""
        req = self.req
        if not req.tools or req.tool_choice == "none":
            return None
        if not self.calls:
            forced = req.tool_choice == "required" or isinstance(req.tool_choice, dict)
            return False if forced and self.finishes else None
        return all(c.valid for c in self.calls.values())

    @property
    def structured_valid(self) -> bool | None:
        """Each choice's text valid JSON (an object for `json_object`) and, for
        `json_schema`, valid against the schema. None when not asked or no text came."""
        if not self.structured or not self.finishes:
            return None
        for choice in self.finishes:
            value = _json("".join(self.texts.get(choice, ())))
            if value is _INVALID or (self.schema is None and not isinstance(value, dict)):
                return False
            if self.schema is not None and not schema_valid(value, self.schema):
                return False
        return True


_INVALID = object()


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _INVALID


def schema_valid(value: Any, schema: dict[str, Any]) -> bool:
    """`value` valid against `schema` (jsonschema, the draft the schema names; a schema
    jsonschema cannot read judges nothing: valid)."""
    import jsonschema  # only models under rollout judging structured answers need it

    try:
        validator = jsonschema.validators.validator_for(schema)
        validator.check_schema(schema)
    except jsonschema.SchemaError:
        return True
    return validator(schema).is_valid(value)
