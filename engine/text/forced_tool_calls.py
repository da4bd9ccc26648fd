"""Tool calls read back from text a forced tool-call grammar produced.

With `tool_choice` "required" or a named function, the native engine decodes under a
grammar whose every sentence is

    CALL_HEAD "<name>" ARGUMENTS_HEAD <arguments valid for that tool> CALL_TAIL
    (CALL_SEPARATOR <another call>)*

(engine/text/hermes_format.py). The text is therefore read by that structure alone:
literals are matched where the grammar put them, the name and the arguments are
delimited by a JSON scanner that knows strings and escapes. Nothing is looked up by
searching for tag text, because the arguments may legitimately contain it: a JSON
string can hold `</tool_call>` or `<tool_call>` (a random model writes them, and
the grammar must allow them, or it would reject valid values). A tag-scanning
parser cut such a call in two, returned unterminated arguments and put the rest
of the call into `content`; reading by structure cannot.

Forbidding tag text inside JSON strings in the grammar was the other way out. It
was not taken: it changes what values a schema admits (a `pattern` or `enum` that
contains the text would become unsatisfiable), it has to reach into every string
of every user schema, and it still leaves a text parser guessing at a structure
the adapter already knows.

What the reader guarantees, given text of the grammar: no content at all; each
call's name once, then its arguments as they arrive; a call counts as closed once
its CALL_TAIL is read. If the text ends inside a call (only `max_tokens` can do
that: the grammar allows a stop token only after a complete call), `complete` is
False. Text that leaves the grammar's shape raises ToolCallFormatError: that would
be a bug in the grammar or the engine, never something to pass on quietly.
"""

from __future__ import annotations

import json

from engine.text.hermes_format import ARGUMENTS_HEAD, CALL_HEAD, CALL_SEPARATOR, CALL_TAIL, ParsedPiece, ToolCallPiece
from engine.text.json_scan import JsonValueScanner


class ToolCallFormatError(ValueError):
    """Forced tool-call output that does not have the grammar's shape."""


# Where the reader is in the grammar's sentence.
_HEAD, _NAME, _ARGUMENTS_HEAD, _ARGUMENTS, _TAIL, _BETWEEN = range(6)
_LITERALS = {_HEAD: CALL_HEAD, _ARGUMENTS_HEAD: ARGUMENTS_HEAD, _TAIL: CALL_TAIL, _BETWEEN: CALL_SEPARATOR}
_AFTER_LITERAL = {_HEAD: _NAME, _ARGUMENTS_HEAD: _ARGUMENTS, _TAIL: _BETWEEN, _BETWEEN: _HEAD}


class ForcedToolCallReader:
    """Reads one choice's grammar-forced output into tool-call pieces."""

    def __init__(self) -> None:
        self._state = _HEAD
        self._pending = ""  # text not read yet (at most a literal's worth while one is matched)
        self._scanner = JsonValueScanner()
        self._name = ""
        self.num_calls = 0  # calls whose name was reported
        self.num_closed_calls = 0  # calls read up to their CALL_TAIL

    @property
    def complete(self) -> bool:
        """Whether the text so far is whole calls (nothing open)."""
        return self._state == _BETWEEN and not self._pending

    def feed(self, text: str) -> list[ParsedPiece]:
        out: list[ParsedPiece] = []
        self._pending += text
        while self._pending and self._step(out):
            pass
        return out

    def finish(self) -> list[ParsedPiece]:
        """The text ended. Nothing held back is released: a partial literal is markup."""
        return []

    def _step(self, out: list[ParsedPiece]) -> bool:
        """Read what the current state can; False when more text is needed."""
        literal = _LITERALS.get(self._state)
        if literal is not None:
            if self._pending.startswith(literal):
                self._pending = self._pending[len(literal) :]
                self._enter(_AFTER_LITERAL[self._state])
                return True
            if literal.startswith(self._pending):
                return False
            raise ToolCallFormatError(f"expected {literal!r}, got {self._pending[: len(literal)]!r}")
        step = self._scanner.take(self._pending)
        self._pending = self._pending[step.used :]
        if self._state == _NAME:
            self._name += step.value
            if self._scanner.done:
                out.append(ToolCallPiece(self.num_calls, name=self._parse_name()))
                self.num_calls += 1
                self._enter(_ARGUMENTS_HEAD)
        else:
            if step.value:
                out.append(ToolCallPiece(self.num_calls - 1, arguments=step.value))
            if self._scanner.done:
                self._enter(_TAIL)
        return bool(self._pending)

    def _enter(self, state: int) -> None:
        if state == _BETWEEN:
            self.num_closed_calls += 1
        if state in (_NAME, _ARGUMENTS):
            self._scanner = JsonValueScanner()
        self._name = ""
        self._state = state

    def _parse_name(self) -> str:
        try:
            name = json.loads(self._name)
        except json.JSONDecodeError as exc:
            raise ToolCallFormatError(f"the tool name {self._name!r} is not a JSON string") from exc
        if not isinstance(name, str) or not name:
            raise ToolCallFormatError(f"the tool name {self._name!r} is not a non-empty string")
        return name
