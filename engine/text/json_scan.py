"""Where one JSON value ends, in text that arrives in pieces.

The tool-call readers find the end of a call's JSON by its structure (strings,
escapes, bracket depth), never by looking for a closing tag: a JSON string may
hold any text, `</tool_call>` included, and only the structure says whether that
text is inside a string or not.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScanStep:
    """What one piece of text gave: `value`, the part that belongs to the JSON value,
    and `used`, how many characters of the piece were read (leading whitespace included)."""

    value: str
    used: int


class JsonValueScanner:
    """Tracks strings, escapes and bracket depth; does not validate (json.loads does that).

    Leading whitespace is read but not part of the value. A scalar (number, literal)
    ends at the first character that cannot continue it, which is not read.
    """

    def __init__(self) -> None:
        self.started = False
        self.done = False
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._scalar = False

    def take(self, text: str) -> ScanStep:
        out: list[str] = []
        used = 0
        for ch in text:
            if self.done:
                break
            if not self.started:
                used += 1
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
                    break
                used += 1
                out.append(ch)
                continue
            used += 1
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
        return ScanStep("".join(out), used)
