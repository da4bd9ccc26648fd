"""The one rule for what the gateway may show of a secret or of a client's text,
wherever it shows it (`/admin/config`, the logs, error messages, traces, `/readyz`,
`config check`, the startup lines): URL userinfo, secret-named query parameters and
`name=value` pairs, credential headers and `Bearer` tokens masked; control characters
escaped as `\\uXXXX` (no client value starts a log line or drives a terminal); client
names clipped, saying how long they were. docs/operations.md, "What the gateway never
shows", lists what is masked. Standard library only, so every package may use it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
NAME_LIMIT = 256  # a client name in an error message or a log line
MESSAGE_LIMIT = 2048  # an error message

_SECRET_NAME = re.compile(
    r"pass(word|wd)?|pwd|secret|token(?!s)|key|auth|credential|signature|^sig$|cookie", re.IGNORECASE
)
_CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)
# Each pattern starts only where its run of name characters starts (the lookbehinds):
# a long run without a match is scanned once, never once per character (linear time).
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_PAIR = re.compile(r"(?<![A-Za-z0-9_.\-\[\]])(?P<name>[A-Za-z0-9_.\-\[\]]+)(?P<sep>=)(?P<value>[^\s&;,'\"<>)}\]]+)")
_HEADER_LINE = re.compile(
    r"\b(?P<name>authorization|proxy-authorization|cookie|set-cookie|x-api-key|api-key)(?P<sep>:\s*)"
    r"(?P<value>(?:(?:bearer|basic|digest|negotiate|token)\s+)?[^\s'\",;]+)",
    re.IGNORECASE,
)
_HEADER_WORDS = ("authorization", "cookie", "api-key")
_BEARER = re.compile(r"\b(?P<scheme>bearer\s+)[^\s'\",;]+|\b(?P<basic>basic\s+)[A-Za-z0-9+/=]{8,}", re.IGNORECASE)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def secret_name(name: str) -> bool:
    """Does a field, header, option or query parameter named `name` hold a secret?"""
    return name.lower() in _CREDENTIAL_HEADERS or _SECRET_NAME.search(name) is not None


def redact_url(url: str) -> str:
    """`url` with its userinfo and its secret query parameters masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text_pairs(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if colon else f"{MASK}@{host}"
    query = redact_text_pairs(parts.query) if parts.query else parts.query
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def redact_text_pairs(text: str) -> str:
    """`name=value` pairs in `text` whose name says secret, masked."""

    def mask(m: re.Match[str]) -> str:
        if not secret_name(m.group("name")) or m.group("value") == MASK:
            return m.group(0)
        return f"{m.group('name')}{m.group('sep')}{MASK}"

    return _PAIR.sub(mask, text)


def redact_text(text: str) -> str:
    """Free text (a log message, an error message, an exception's words) with every
    secret the rule knows masked: URLs' userinfo and secret parameters, secret
    `name=value` pairs, `Bearer <token>`. Cheap when there is nothing to mask."""
    if "://" in text:
        text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    if "=" in text:
        text = redact_text_pairs(text)
    lower = text.lower()  # the regexes below run only where their words are (the access log's lines have none)
    if ":" in text and any(word in lower for word in _HEADER_WORDS):
        text = _HEADER_LINE.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", text)
    if "bearer" in lower or "basic" in lower:
        text = _BEARER.sub(lambda m: f"{m.group('scheme') or m.group('basic')}{MASK}", text)
    return text


def escape_controls(text: str) -> str:
    """`text` with every control character written as `\\uXXXX` (JSON's own escape, so
    a JSON line stays valid): one line stays one line, and no terminal escape runs."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def clip(text: str, limit: int = NAME_LIMIT) -> str:
    """`text` cut to `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} characters)"


def public_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """An error message as a client or a log reads it: secrets masked, clipped."""
    shown = redact_text(message[: 4 * limit])[:limit]  # masked before it is cut, and bounded
    return shown if len(message) <= limit else f"{shown}...({len(message)} characters)"


def shown_name(name: str, limit: int = NAME_LIMIT) -> str:
    """A client's name (a model, an id) as an error message, a log line or a span
    shows it: secrets masked, clipped, control characters escaped."""
    shown = redact_text(name[: 4 * limit])[:limit]  # masked before it is cut: a cut URL hides nothing
    if len(name) > limit:
        shown = f"{shown}...({len(name)} characters)"
    return escape_controls(shown)
