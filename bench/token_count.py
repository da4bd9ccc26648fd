"""Counting tokens the way the target does, so that `--input-tokens N` means N
tokens of the target's tokenizer and not N words.

Where the counts come from, best first:

1. the target's own `/tokenize` endpoint, found by trying it: vLLM and SGLang
   answer `POST /tokenize {"model", "prompt"}` with `{"count", "tokens", ...}`,
   TGI answers `POST /tokenize {"inputs"}` with a list of tokens;
2. a `tokenizer.json` the user names (`--tokenizer`), read with the
   `tokenizers` library;
3. nothing: the caller falls back to an estimate and says so.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from processes.install import install_hint

CountKind = Literal["endpoint", "tokenizer", "estimate"]
PROBE_TEXT = "How many tokens is this?"


class TokenizerError(ValueError):
    """A named tokenizer that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class CountMethod:
    kind: CountKind
    description: str  # for reports: where the counts came from

    @property
    def estimate(self) -> bool:
        return self.kind == "estimate"


class TokenCounter(Protocol):
    method: CountMethod

    def count(self, text: str) -> int: ...


class EndpointCounter:
    """Counts with the target's `/tokenize` over one kept-alive connection,
    remembering every text it has counted (a sweep sizes the same prompts again)."""

    def __init__(self, root: str, model: str, style: Literal["vllm", "tgi"], headers: dict[str, str]) -> None:
        self.url = root + "/tokenize"
        self.model = model
        self.style = style
        self.headers = {"Content-Type": "application/json", **headers}
        runtime = "vLLM/SGLang" if style == "vllm" else "TGI"
        self.method = CountMethod("endpoint", f"the target's tokenizer: POST {self.url} ({runtime} style)")
        self._conn = _connection(root)
        self._memo: dict[str, int] = {}

    def body(self, text: str) -> dict[str, Any]:
        return {"model": self.model, "prompt": text} if self.style == "vllm" else {"inputs": text}

    def count(self, text: str) -> int:
        if text not in self._memo:
            status, data = self._post(self.body(text))
            n = _count_of(data, self.style) if status == 200 else None
            if n is None:
                raise TokenizerError(f"{self.url} stopped counting tokens (HTTP {status}: {str(data)[:200]})")
            self._memo[text] = n
        return self._memo[text]

    def _post(self, body: dict[str, Any]) -> tuple[int, Any]:
        path = urlsplit(self.url).path
        payload = json.dumps(body).encode()
        for attempt in (1, 2):  # once more on a connection the server closed while idle
            try:
                self._conn.request("POST", path, payload, self.headers)
                resp = self._conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, ConnectionError):
                self._conn.close()
                if attempt == 2:
                    raise
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw.decode("utf-8", "replace")

    def close(self) -> None:
        self._conn.close()


class FileTokenizerCounter:
    def __init__(self, path: Path) -> None:
        file = path / "tokenizer.json" if path.is_dir() else path
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerError("--tokenizer needs the `tokenizers` library: " + install_hint("bench")) from None
        try:
            self._tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises its own exception types for unreadable files
            raise TokenizerError(f"--tokenizer {path}: cannot load {file}: {exc}") from None
        self.method = CountMethod("tokenizer", f"the tokenizer named with --tokenizer: {file}")

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text).ids)


def root_of(base_url: str) -> str:
    """`http://host:port` from `http://host:port` or `http://host:port/v1` (vLLM's
    `/tokenize` is beside `/v1`, not under it)."""
    return base_url.rstrip("/").removesuffix("/v1")


def detect_endpoint(base_url: str, model: str, headers: dict[str, str] | None = None) -> EndpointCounter | None:
    """The target's `/tokenize` if it answers a probe in a known shape, else None
    (a 404, another shape, or no answer at all)."""
    root = root_of(base_url)
    for style in ("vllm", "tgi"):
        counter = EndpointCounter(root, model, style, headers or {})
        try:
            status, data = counter._post(counter.body(PROBE_TEXT))
        except (OSError, http.client.HTTPException):
            counter.close()
            return None
        if status == 200 and _count_of(data, style) is not None:
            return counter
        counter.close()
    return None


def choose_counter(
    base_url: str, model: str, tokenizer: Path | None, headers: dict[str, str] | None = None
) -> TokenCounter | None:
    """The endpoint, else the named tokenizer, else None (estimate). A named
    tokenizer is loaded even when the endpoint answers, so a wrong path is an
    error rather than a silent no-op."""
    named = FileTokenizerCounter(tokenizer) if tokenizer is not None else None
    endpoint = detect_endpoint(base_url, model, headers)
    if endpoint is None:
        return named
    if named is not None:
        endpoint.method = CountMethod("endpoint", endpoint.method.description + "; --tokenizer not used")
    return endpoint


def _count_of(data: Any, style: str) -> int | None:
    if style == "vllm" and isinstance(data, dict):
        if isinstance(data.get("count"), int):
            return data["count"]
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
        return None
    if style == "tgi" and isinstance(data, list):
        return len(data)
    return None


def _connection(root: str) -> http.client.HTTPConnection:
    parts = urlsplit(root)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.netloc, timeout=30)
    return http.client.HTTPConnection(parts.netloc, timeout=30)
