"""Every log line the gateway writes passes the one redaction rule
(policies/redact.py): the text log (the gateway's own lines and uvicorn's), and
the JSON access log. `SafeLines` is a logging filter on each of their handlers:
the message's secrets masked, its control characters escaped (a newline or an
ESC a client put in a model name, a path or a header cannot forge a line or
drive a terminal), its length bounded; a traceback keeps its lines, each
indented, so none of them reads as a line of its own."""

from __future__ import annotations

import logging

from policies.redact import escape_controls, public_message, redact_text

LINE_LIMIT = 16_384  # one log message, in characters (a traceback comes on top)
_DONE = "_switchyard_safe"


class SafeLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _DONE, False):
            return True
        message = record.getMessage()
        # masked, then cut to the limit, saying the message's whole length
        record.msg = escape_controls(public_message(message, LINE_LIMIT))
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = _lines(record.exc_text)
        if record.stack_info:
            record.stack_info = _lines(record.stack_info)
        setattr(record, _DONE, True)
        return True


def _lines(text: str) -> str:
    """A multi-line text (a traceback, written after the message's line) redacted and
    escaped line by line, every line indented: none reads as a log line of its own."""
    lines = [escape_controls(redact_text(line)) for line in text.split("\n")]
    return "\n".join(line if line.startswith(" ") else "  " + line for line in lines)


def guard(*loggers: str) -> None:
    """Put `SafeLines` on every handler of the named loggers (once each)."""
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            guard_handler(handler)


def guard_handler(handler: logging.Handler) -> None:
    if not any(isinstance(f, SafeLines) for f in handler.filters):
        handler.addFilter(SafeLines())
