"""The hermes tool-call format, and what the tool-call readers hand back.

Models with a Qwen2/hermes chat template write a tool call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

with calls joined by a newline. The forced-call grammar (engine/structured/grammars.py)
writes exactly these literals, and ForcedToolCallReader reads exactly them back, so the
two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

START_TAG = "<tool_call>"
END_TAG = "</tool_call>"

# One call, as the grammar writes it: CALL_HEAD, the name as a JSON string,
# ARGUMENTS_HEAD, the arguments as JSON, CALL_TAIL; calls joined by CALL_SEPARATOR.
CALL_HEAD = START_TAG + '\n{"name": '
ARGUMENTS_HEAD = ', "arguments": '
CALL_TAIL = "}\n" + END_TAG
CALL_SEPARATOR = "\n"


@dataclass(slots=True)
class ContentPiece:
    text: str


@dataclass(slots=True)
class ToolCallPiece:
    """A piece of call `tool_index`: the first carries the name, later ones argument text."""

    tool_index: int
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class DroppedCallPiece:
    """Model text that opened a tool call but is not a valid one (free text only): it is
    neither content nor a call; the adapter logs it."""

    text: str
    reason: str


ParsedPiece = ContentPiece | ToolCallPiece | DroppedCallPiece
