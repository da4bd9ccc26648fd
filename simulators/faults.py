"""Per-request fault injection and overrides.

A request picks its faults with a marker anywhere in its prompt text (any message
content, or the completion prompt), because a gateway forwards prompts verbatim
but may drop fields it does not know:

    [[sim:error_after=3]]            in-stream error after 3 content chunks
    [[sim:cut_after=2]]              close the TCP connection after 2 chunks, no [DONE]
    [[sim:no_done]]                  finish the stream normally but omit the terminator
    [[sim:status=503]]               answer this HTTP status before any work, runtime's error shape
    [[sim:overloaded]]               the runtime's own overload answer (queue full / 429)
    [[sim:tool_call]]                answer with a tool call (needs `tools` in the request)
    [[sim:output_tokens=5]]          override the synthetic output length
    [[sim:prompt_tokens=5000]]       pretend the prompt has this many tokens
    [[sim:ttft_ms=200,itl_ms=5]]     override timing for this request
    [[sim:finish=abort]]             end with this engine finish reason (abort, repetition)
    [[sim:usage_extra=1]]            vLLM: report 1 completion token more than generated (a miscount)
    [[sim:overload_status=500]]      vLLM: answer this status instead of its own 503 when its queue is full
    [[sim:keep_cancelled]]           a client that leaves is never freed: it keeps counting as running

Faults that make a bad rollout candidate (vLLM simulator; usually set for every request
with `--fault`, tests/rollout uses them):

    [[sim:error_every=20]]           every 20th request this server gets answers 500 (5%, deterministic)
    [[sim:bad_tool_args]]            a tool call's arguments are not valid JSON (the closing brace cut)
    [[sim:prompt_tokens_scale=1.25]] usage counts the prompt 25% bigger than it is

A doubled time to first token needs no fault: `--ttft-ms` twice the stable one's.

Several keys can share one marker, separated by commas or spaces. The same keys
can be sent as a JSON object in the body field `sim_fault` (every simulator,
TRT-LLM included, accepts that one field), or set for every request with the CLI
flag `--fault "error_after=3"`. Request values win over the CLI default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

MARKER = re.compile(r"\[\[sim:([^\]]*)\]\]")
MAGIC_FIELD = "sim_fault"

_INT_KEYS = (
    "error_after",
    "cut_after",
    "status",
    "output_tokens",
    "prompt_tokens",
    "error_every",
    "usage_extra",
    "overload_status",
)
_FLOAT_KEYS = ("ttft_ms", "itl_ms", "prompt_tokens_scale")
_FLAG_KEYS = ("no_done", "overloaded", "tool_call", "bad_tool_args", "keep_cancelled")


@dataclass(frozen=True, slots=True)
class Faults:
    error_after: int | None = None
    cut_after: int | None = None
    no_done: bool = False
    status: int | None = None
    overloaded: bool = False
    tool_call: bool = False
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None
    finish: str | None = None
    # Bad rollout candidates (tests/rollout).
    error_every: int | None = None
    bad_tool_args: bool = False
    prompt_tokens_scale: float | None = None
    # Broken runtimes, for the bake-off's stages to catch (simulators/README.md, "Broken runtimes").
    usage_extra: int | None = None
    overload_status: int | None = None
    keep_cancelled: bool = False

    @property
    def any_stream_fault(self) -> bool:
        return self.error_after is not None or self.cut_after is not None or self.no_done


NO_FAULTS = Faults()


def parse_spec(spec: str) -> dict[str, Any]:
    """`"error_after=3, no_done"` -> `{"error_after": 3, "no_done": True}`."""
    values: dict[str, Any] = {}
    for item in re.split(r"[,\s]+", spec.strip()):
        if not item:
            continue
        key, _, raw = item.partition("=")
        values.update(_coerce(key.strip(), raw.strip() if raw else None))
    return values


def _coerce(key: str, raw: Any) -> dict[str, Any]:
    try:
        if key in _INT_KEYS:
            number = int(raw)
            return {key: number} if number >= 0 else {}
        if key in _FLOAT_KEYS:
            seconds = float(raw)
            return {key: seconds} if seconds >= 0 else {}
        if key in _FLAG_KEYS:
            return {key: raw in (None, True, "1", "true", "yes") or raw is True}
        if key == "finish" and raw:
            return {key: str(raw)}
    except (TypeError, ValueError):
        pass
    return {}  # unknown or malformed keys are ignored: a stray marker must not break a request


def merge(base: Faults, values: dict[str, Any]) -> Faults:
    return replace(base, **values) if values else base


def faults_for(default: Faults, texts: list[str], body: dict[str, Any]) -> Faults:
    """The faults of one request: CLI default, then prompt markers, then the body field."""
    values: dict[str, Any] = {}
    for text in texts:
        if "[[sim:" in text:
            for match in MARKER.finditer(text):
                values.update(parse_spec(match.group(1)))
    magic = body.get(MAGIC_FIELD)
    if isinstance(magic, dict):
        for key, raw in magic.items():
            values.update(_coerce(str(key), raw))
    elif isinstance(magic, str):
        values.update(parse_spec(magic))
    return merge(default, values)
