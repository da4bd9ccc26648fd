"""Hermes-style tool calls in free text, parsed while the text streams.

Models with a Qwen2/hermes chat template answer a tool call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

(the format vLLM's `hermes` parser reads). `HermesToolParser` takes the generated
text in pieces of any size and returns content pieces and tool-call pieces:

- text that may be the beginning of `<tool_call>` is held back, never shown;
- a call's name is reported once, as soon as it is complete (no id: the gateway gives
  every tool call its own);
- then the `arguments` value is reported as JSON text fragments, as it arrives,
  without the enclosing object's `}` or the closing tag;
- calls are numbered 0, 1, ... in order;
- a call that does not have the expected shape (bad JSON, no name, a name not in
  the request's tools) comes back as plain content, unchanged, when it closes.

Once a call's name was reported it cannot be taken back: if its arguments later
turn out malformed or truncated, the fragments already sent stand (vLLM behaves
the same way).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

START_TAG = "<tool_call>"
END_TAG = "</tool_call>"

# The call's header up to where the arguments value begins.
_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
# What may legitimately follow a complete arguments value before the closing tag.
_TRAILER = re.compile(r"\s*\}\s*")


@dataclass(slots=True)
class ContentPiece:
    text: str


@dataclass(slots=True)
class ToolCallPiece:
    """A piece of call `tool_index`: the first carries the name, later ones argument text."""

    tool_index: int
    name: str | None = None
    arguments: str = ""


ParsedPiece = ContentPiece | ToolCallPiece


class _JsonValueScanner:
    """Finds where one JSON value ends in text that arrives in pieces.

    Tracks strings, escapes and bracket depth only; it does not validate. Leading
    whitespace is skipped and not part of the value.
    """

    def __init__(self) -> None:
        self.started = False
        self.done = False
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._scalar = False

    def take(self, text: str) -> str:
        """The part of `text` that belongs to the value (what follows the value's end is not)."""
        out: list[str] = []
        for ch in text:
            if self.done:
                return "".join(out)
            if not self.started:
                if ch.isspace():
                    continue
                self.started = True
                if ch in "{[":
                    self._depth = 1
                elif ch == '"':
                    self._in_string = True
                else:
                    self._scalar = True
                out.append(ch)
                continue
            if self._scalar:
                if ch in ",}]" or ch.isspace():
                    self.done = True
                    return "".join(out)
                out.append(ch)
                continue
            out.append(ch)
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._in_string = False
                    if self._depth == 0:
                        self.done = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self.done = True
            elif ch == '"':
                self._in_string = True
        return "".join(out)


class _Call:
    """The state of the tool call being read."""

    def __init__(self) -> None:
        self.body = ""  # text after <tool_call>, up to the closing tag
        self.consumed = 0  # how much of body the arguments scanner has seen
        self.announced = False  # the name was reported
        self.rejected = False  # name known and not allowed: the call becomes content
        self.args = _JsonValueScanner()


class HermesToolParser:
    """Streaming parser for one choice's generated text."""

    def __init__(self, tool_names: set[str] | None = None) -> None:
        self._tool_names = tool_names
        self._pending = ""  # content not yet released (a possible start tag)
        self._call: _Call | None = None
        self._held_space = ""  # whitespace right after a call, dropped if another call follows
        self.num_calls = 0  # calls announced so far
        self.num_closed_calls = 0  # calls whose closing tag was read

    def feed(self, text: str) -> list[ParsedPiece]:
        out: list[ParsedPiece] = []
        self._pending += text
        while self._pending:
            if self._call is None:
                if not self._read_content(out):
                    break
            elif not self._read_call(out):
                break
        return out

    def finish(self) -> list[ParsedPiece]:
        """The text ended: release what was held back."""
        out: list[ParsedPiece] = []
        call = self._call
        if call is not None:
            self._call = None
            if not call.announced:
                self._emit_content(out, START_TAG + call.body)
        elif self._pending:
            self._emit_content(out, self._pending)
        self._pending = ""
        return out

    # ---- content ------------------------------------------------------------

    def _read_content(self, out: list[ParsedPiece]) -> bool:
        """Release content up to a start tag; return True when a call begins."""
        text = self._pending
        pos = text.find(START_TAG)
        if pos != -1:
            self._emit_content(out, text[:pos], before_call=True)
            self._pending = text[pos + len(START_TAG) :]
            self._call = _Call()
            return True
        keep = _partial_tag_len(text, START_TAG)
        self._emit_content(out, text[: len(text) - keep])
        self._pending = text[len(text) - keep :]
        return False

    def _emit_content(self, out: list[ParsedPiece], text: str, *, before_call: bool = False) -> None:
        # Whitespace between calls (the newline the template puts between them) is
        # layout, not content: hold it, and drop it if another call follows.
        if self.num_closed_calls:
            text = self._held_space + text
            self._held_space = ""
            if before_call and not text.strip():
                return
            if not text.strip():
                self._held_space = text
                return
        if text:
            if out and isinstance(out[-1], ContentPiece):
                out[-1].text += text
            else:
                out.append(ContentPiece(text))

    # ---- a call -------------------------------------------------------------

    def _read_call(self, out: list[ParsedPiece]) -> bool:
        """Move pending text into the open call; return True when the call closed."""
        call = self._call
        assert call is not None
        text = self._pending
        end = text.find(END_TAG)
        closed = end != -1
        if closed:
            call.body += text[:end]
            self._pending = text[end + len(END_TAG) :]
        else:
            # Part of a closing tag stays pending so the body never holds half a tag.
            keep = _partial_tag_len(text, END_TAG)
            call.body += text[: len(text) - keep]
            self._pending = text[len(text) - keep :]

        if not call.announced and not call.rejected:
            self._try_announce(call, out)
        if call.announced:
            fragment = call.args.take(call.body[call.consumed :])
            call.consumed = len(call.body)
            if fragment:
                out.append(ToolCallPiece(self.num_calls - 1, arguments=fragment))
        if not closed:
            return False

        self._call = None
        if call.announced:
            self.num_closed_calls += 1
        else:
            self._close_unannounced(call, out)
        return True

    def _try_announce(self, call: _Call, out: list[ParsedPiece]) -> None:
        header = _HEADER.match(call.body)
        if header is None:
            return
        try:
            name = json.loads(f'"{header.group(1)}"')
        except json.JSONDecodeError:
            call.rejected = True
            return
        if not name or (self._tool_names is not None and name not in self._tool_names):
            call.rejected = True
            return
        call.announced = True
        call.consumed = header.end()
        out.append(ToolCallPiece(self.num_calls, name=name))
        self.num_calls += 1

    def _close_unannounced(self, call: _Call, out: list[ParsedPiece]) -> None:
        """A closed call whose header never matched the streaming form (other key
        order, odd spacing): parse it whole, or give it back as content."""
        parsed = None
        if not call.rejected:
            try:
                parsed = json.loads(call.body)
            except json.JSONDecodeError:
                parsed = None
        name = parsed.get("name") if isinstance(parsed, dict) else None
        args_key = next((k for k in ("arguments", "parameters") if isinstance(parsed, dict) and k in parsed), None)
        if (
            not isinstance(name, str)
            or not name
            or args_key is None
            or (self._tool_names is not None and name not in self._tool_names)
        ):
            self._emit_content(out, START_TAG + call.body + END_TAG)
            return
        out.append(ToolCallPiece(self.num_calls, name=name))
        out.append(ToolCallPiece(self.num_calls, arguments=json.dumps(parsed[args_key], ensure_ascii=False)))
        self.num_calls += 1
        self.num_closed_calls += 1


def _partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
