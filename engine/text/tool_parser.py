"""Hermes-style tool calls in free text (`tool_choice` "auto"), parsed while the text streams.

Without a grammar the model may write anything, so this parser promises two things
whatever it reads: no tool-call markup ever reaches content, and no call is ever
returned broken. How:

- Content is released as it arrives, except text that may be the beginning of a
  tag, which is held back until it is clearly not one. A `</tool_call>` with no call
  open is dropped: it is markup, whatever the model meant by it.
- After `<tool_call>` comes one JSON value, delimited by its structure (strings and
  escapes included), never by searching for `</tool_call>`: a JSON string may hold
  tag text (see engine/text/json_scan.py).
- The call is reported when that value is complete and is a valid call:
  `{"name": <one of the request's tools>, "arguments": <JSON object>}` (other key
  order, and "parameters" for "arguments", are accepted). Its name and its
  arguments come out together then, not piece by piece: only a complete value can
  be known to be valid, and a name once sent cannot be taken back. Calls are
  numbered 0, 1, ... in order; they have no id (the gateway gives each its own).
- After a call, whitespace and `</tool_call>` are layout. The closing tag may be
  missing: other text after the JSON is content again.
- A call that is not valid (the value is not JSON, not an object, names no tool or
  an unknown one, has no object arguments, or the text ends before the value does)
  is dropped, from `<tool_call>` to its `</tool_call>` or to the end of the output:
  it comes back as a DroppedCallPiece, which the adapter logs, never as content or
  as a call. A value that never ends (an unterminated `<tool_call>`) is known only
  when the output ends; it is then cut at its first `</tool_call>`, if any, and the
  text after that tag is read again (content, or more calls); without such a tag
  the rest of the output is dropped with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from engine.text.hermes_format import END_TAG, START_TAG, ContentPiece, DroppedCallPiece, ParsedPiece, ToolCallPiece
from engine.text.json_scan import JsonValueScanner

__all__ = ["ContentPiece", "DroppedCallPiece", "HermesToolParser", "ParsedPiece", "ToolCallPiece"]


@dataclass
class _OpenCall:
    """The call being read: its text after `<tool_call>` so far and its JSON value."""

    raw: str = ""
    value: str = ""
    scanner: JsonValueScanner = field(default_factory=JsonValueScanner)
    invalid: str | None = None  # why the value is not a call; then the rest up to END_TAG is skipped


class HermesToolParser:
    """Streaming parser for one choice's generated text."""

    def __init__(self, tool_names: set[str] | None = None) -> None:
        self._tool_names = tool_names
        self._pending = ""  # text not yet read (a possible tag, or layout after a call)
        self._call: _OpenCall | None = None
        self._after_call = False  # just after a call's JSON: whitespace and END_TAG are layout
        self._held_space = ""  # whitespace right after a call, dropped if another call follows
        self._only_space_since_call = False  # nothing but whitespace was read since the last call
        self._content_tail = ""  # the end of the content released so far (shorter than a tag)
        # A partial tag that content already released and a dropped stray closing tag
        # cut off from its rest (`<tool` + `</tool_call>` + `_call>`): the rest is markup.
        self._orphan = ""
        self.num_calls = 0  # calls reported (each complete and valid)

    @property
    def num_closed_calls(self) -> int:
        """Calls that are complete: here every reported call is."""
        return self.num_calls

    def feed(self, text: str) -> list[ParsedPiece]:
        out: list[ParsedPiece] = []
        self._pending += text
        self._read(out)
        return out

    def finish(self) -> list[ParsedPiece]:
        """The text ended: release held content, drop an open call (see the module's doc)."""
        out: list[ParsedPiece] = []
        while self._call is not None:
            call, self._call = self._call, None
            raw = call.raw + self._pending
            self._pending = ""
            cut = raw.find(END_TAG) if call.invalid is None else -1
            if cut == -1:
                out.append(DroppedCallPiece(START_TAG + raw, call.invalid or "the output ended inside the call"))
                break
            out.append(DroppedCallPiece(START_TAG + raw[: cut + len(END_TAG)], "its JSON never ended"))
            self._pending = raw[cut + len(END_TAG) :]
            self._read(out)
        if self._after_call:
            self._after_call = False  # what is pending is whitespace or part of a closing tag: layout
        elif self._pending:
            self._emit_content(out, self._pending)
        self._pending = ""
        return out

    def _read(self, out: list[ParsedPiece]) -> None:
        while self._pending:
            if self._call is not None:
                progressed = self._read_call(self._call, out)
            elif self._after_call:
                progressed = self._read_after_call()
            else:
                progressed = self._read_content(out)
            if not progressed:
                break

    # ---- content ------------------------------------------------------------

    def _read_content(self, out: list[ParsedPiece]) -> bool:
        """Release content up to a tag; return True when a call begins or a stray closing tag was dropped."""
        text = self._pending
        if self._orphan:
            joined = self._orphan + text
            for tag in (START_TAG, END_TAG):
                if joined.startswith(tag):
                    self._orphan = ""
                    self._pending = joined[len(tag) :]
                    if tag == START_TAG:
                        self._call = _OpenCall()
                    else:
                        out.append(DroppedCallPiece(END_TAG, "a closing tag outside a call"))
                    return True
            if any(tag.startswith(joined) for tag in (START_TAG, END_TAG)):
                return False  # the rest of the tag may still come
            self._orphan = ""
        start, stray = text.find(START_TAG), text.find(END_TAG)
        if stray != -1 and (start == -1 or stray < start):
            # A closing tag with no call open is markup all the same: never content.
            # The text is read as if the tag were not there, so a partial tag just
            # before it (`<tool` + `</tool_call>` + `_call>`) joins what follows it
            # instead of reaching the content as two halves of a tag.
            before = text[:stray]
            keep = max(_partial_tag_len(before, START_TAG), _partial_tag_len(before, END_TAG))
            self._emit_content(out, before[: len(before) - keep])
            out.append(DroppedCallPiece(END_TAG, "a closing tag outside a call"))
            self._pending = before[len(before) - keep :] + text[stray + len(END_TAG) :]
            if not keep:
                tail = self._content_tail
                self._orphan = tail[
                    len(tail) - max(_partial_tag_len(tail, START_TAG), _partial_tag_len(tail, END_TAG)) :
                ]
            return True
        if start != -1:
            self._emit_content(out, text[:start], before_call=True)
            self._pending = text[start + len(START_TAG) :]
            self._call = _OpenCall()
            return True
        keep = max(_partial_tag_len(text, START_TAG), _partial_tag_len(text, END_TAG))
        self._emit_content(out, text[: len(text) - keep])
        self._pending = text[len(text) - keep :]
        return False

    def _emit_content(self, out: list[ParsedPiece], text: str, *, before_call: bool = False) -> None:
        # Whitespace between calls (the newline the template puts between them) is
        # layout, not content: hold it, and drop it if another call follows or the
        # text ends. Once content follows a call, its whitespace is content, however
        # the chunks cut it.
        if self._only_space_since_call:
            text = self._held_space + text
            self._held_space = ""
            if not text.strip():
                if not before_call:
                    self._held_space = text
                return
            self._only_space_since_call = False
        if text:
            self._content_tail = (self._content_tail + text)[-len(END_TAG) :]
            if out and isinstance(out[-1], ContentPiece):
                out[-1].text += text
            else:
                out.append(ContentPiece(text))

    # ---- a call -------------------------------------------------------------

    def _read_call(self, call: _OpenCall, out: list[ParsedPiece]) -> bool:
        """Read pending text into the open call; return True when the call ended."""
        if call.invalid is None:
            step = call.scanner.take(self._pending)
            call.raw += self._pending[: step.used]
            call.value += step.value
            self._pending = self._pending[step.used :]
            if call.value[:1] not in ("", "{"):
                # Not an object, so not a call: what the scanner read means nothing, search it again.
                call.invalid = "its body is not a JSON object"
                self._pending, call.raw = call.raw + self._pending, ""
            elif not call.scanner.done:
                return False
            else:
                call.invalid = self._report(call.value, out)
            if call.invalid is None:
                self._call = None
                self._after_call = True
                return True
        # Not a call: skip it up to its closing tag (it has no structure to go by).
        pos = self._pending.find(END_TAG)
        if pos == -1:
            keep = _partial_tag_len(self._pending, END_TAG)
            call.raw += self._pending[: len(self._pending) - keep]
            self._pending = self._pending[len(self._pending) - keep :]
            return False
        call.raw += self._pending[: pos + len(END_TAG)]
        self._pending = self._pending[pos + len(END_TAG) :]
        out.append(DroppedCallPiece(START_TAG + call.raw, call.invalid))
        self._call = None
        return True

    def _read_after_call(self) -> bool:
        """Drop the layout after a call; return True once content may follow."""
        rest = self._pending.lstrip()
        if rest.startswith(END_TAG):
            self._pending = rest[len(END_TAG) :]
            self._after_call = False
            return True
        if not rest or END_TAG.startswith(rest):
            return False  # whitespace or part of the closing tag so far
        self._after_call = False  # no closing tag: what follows is content (or another call)
        return True

    def _report(self, value: str, out: list[ParsedPiece]) -> str | None:
        """Report the call whose JSON is `value`; or return why it is not a valid call."""
        try:
            call = json.loads(value)
        except json.JSONDecodeError:
            return "its body is not JSON"
        if not isinstance(call, dict):
            return "its body is not a JSON object"
        name = call.get("name")
        if not isinstance(name, str) or not name:
            return "it has no name"
        if self._tool_names is not None and name not in self._tool_names:
            return f"{name!r} is not one of the request's tools"
        arguments = call.get("arguments", call.get("parameters"))
        if not isinstance(arguments, dict):
            return "its arguments are not a JSON object"
        out.append(ToolCallPiece(self.num_calls, name=name))
        out.append(ToolCallPiece(self.num_calls, arguments=json.dumps(arguments, ensure_ascii=False)))
        self.num_calls += 1
        self._only_space_since_call = True
        return None


def _partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
