"""What a check runs against: the target, raw HTTP, the official client, and
small helpers that turn a wrong answer into a failure with evidence."""

from __future__ import annotations

import copy
from typing import Any

import openai

from conformance.capabilities import FEATURES
from conformance.http import Exchange, Http
from conformance.result import CheckFailed, Evidence, Skipped
from conformance.schema import FieldIssue, error_envelope_issues
from conformance.target import Target

# Deterministic by construction: greedy decoding plus a seed, so that two
# identical requests must agree and no check depends on luck. The prompt is
# plain ASCII; a random-weight model answers with gibberish, which every check
# tolerates (they compare answers with each other, never with expected text).
DEFAULT_PROMPT = "Tell me a short story about a quick brown fox."
DEFAULT_MAX_TOKENS = 16
SEED = 1234


class Context:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.http = Http(target)
        self._sdk: openai.AsyncOpenAI | None = None
        self.memo: dict[str, Any] = {}  # answers shared between checks (e.g. the greedy baseline)

    async def aclose(self) -> None:
        await self.http.aclose()
        if self._sdk is not None:
            await self._sdk.close()

    # ---- the two clients ---------------------------------------------------

    @property
    def sdk(self) -> openai.AsyncOpenAI:
        """The official client, validating every response and chunk with its
        pydantic models, and never retrying (a retry would hide a failure)."""
        if self._sdk is None:
            self._sdk = openai.AsyncOpenAI(
                base_url=self.target.base_url,
                api_key=self.target.api_key or "sk-no-key",
                max_retries=0,
                timeout=self.target.timeout_s,
                _strict_response_validation=True,
                default_headers=self.target.extra_headers or None,
            )
        return self._sdk

    def chat_body(self, **overrides: Any) -> dict[str, Any]:
        return self._body({"messages": [{"role": "user", "content": DEFAULT_PROMPT}]}, overrides)

    def completion_body(self, **overrides: Any) -> dict[str, Any]:
        return self._body({"prompt": DEFAULT_PROMPT}, overrides)

    def _body(self, input_fields: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        """The deterministic defaults around `input_fields`, then `overrides`
        (copied, so a check never shares a nested value with another; DROP removes a key)."""
        body: dict[str, Any] = {
            "model": self.target.model,
            **input_fields,
            "temperature": 0,
            "seed": SEED,
            "max_tokens": DEFAULT_MAX_TOKENS,
        }
        for key, value in overrides.items():
            if value is _DROP:
                body.pop(key, None)
            else:
                body[key] = copy.deepcopy(value)
        return body

    def responses_body(self, **overrides: Any) -> dict[str, Any]:
        """A Responses API request (conformance/checks/responses.py): no seed there, greedy only."""
        body: dict[str, Any] = {"model": self.target.model, "input": DEFAULT_PROMPT, "temperature": 0}
        body.update(copy.deepcopy(overrides))
        return body

    async def responses(self, **overrides: Any) -> Exchange:
        return await self.http.post("/responses", self.responses_body(**overrides))

    async def chat(self, **overrides: Any) -> Exchange:
        return await self.http.post("/chat/completions", self.chat_body(**overrides))

    async def completion(self, **overrides: Any) -> Exchange:
        return await self.http.post("/completions", self.completion_body(**overrides))

    # ---- verdict helpers ----------------------------------------------------

    @staticmethod
    def fail(
        message: str,
        *,
        expected: str,
        seen: str,
        where: str = "",
        offending: Any = None,
        exchange: Exchange | None = None,
    ) -> CheckFailed:
        return CheckFailed(
            message,
            [
                Evidence(
                    expected=expected,
                    seen=seen,
                    where=where,
                    offending=offending,
                    request=exchange.request_summary() if exchange else None,
                )
            ],
        )

    def ok_json(self, ex: Exchange, what: str = "response", capability: str | None = None) -> dict[str, Any]:
        """Require 200 with a JSON object body; return it. With `capability`
        (tools, structured output), an explicit refusal is a skip, not a failure."""
        self._require_200(ex, what, capability)
        if not ex.content_type.startswith("application/json"):
            raise self._wrong_content_type(ex, f"{what}: not JSON", "application/json")
        body = ex.json()
        if not isinstance(body, dict):
            raise self.fail(
                f"{what}: body is not a JSON object", expected="a JSON object", seen=_body_excerpt(ex), exchange=ex
            )
        return body

    def ok_stream(self, ex: Exchange, what: str = "stream", capability: str | None = None) -> list[dict[str, Any]]:
        """Require 200 text/event-stream; return the JSON chunks (framing is
        judged by its own check, so it is not enforced here)."""
        self._require_200(ex, what, capability)
        if ex.sse is None:
            raise self._wrong_content_type(ex, f"{what}: not an event stream", "text/event-stream")
        return ex.sse.chunks

    def _wrong_content_type(self, ex: Exchange, message: str, wanted: str) -> CheckFailed:
        return self.fail(
            message,
            expected=f"Content-Type: {wanted}",
            seen=f"Content-Type: {ex.content_type or '<none>'}",
            where="header content-type",
            offending=_body_excerpt(ex),
            exchange=ex,
        )

    def _require_200(self, ex: Exchange, what: str, capability: str | None) -> None:
        """A complete body, HTTP 200; with `capability`, an explicit refusal is a skip."""
        self.complete_body(ex, what)
        if capability:
            self.skip_if_unsupported(ex, capability)
        self._require_status(ex, what, (200,))

    def _require_status(self, ex: Exchange, what: str, allowed: tuple[int, ...]) -> None:
        if ex.status not in allowed:
            raise self.fail(
                f"{what}: HTTP {ex.status}",
                expected="HTTP " + " or ".join(map(str, allowed)),
                seen=f"HTTP {ex.status}",
                offending=_body_excerpt(ex),
                exchange=ex,
            )

    def complete_body(self, ex: Exchange, what: str) -> None:
        if ex.transport_error:
            raise self.fail(
                f"{what}: the server closed the connection mid-body",
                expected="a complete HTTP body",
                seen=ex.transport_error,
                offending=_body_excerpt(ex),
                exchange=ex,
            )

    def skip_if_unsupported(self, ex: Exchange, capability: str) -> None:
        """A server may honestly refuse a feature its runtime lacks (README.md, "Request
        semantics worth knowing": such a feature "is answered with 400 naming the
        runtime"). That is reported as a skip naming the refusal: not a pass, and not a
        conformance failure. A target declared without the feature never gets here:
        its checks are `na` before they run."""
        if ex.status not in (400, 501):
            return
        body = ex.json()
        message = error_message(body)
        err = body.get("error") if isinstance(body, dict) else None
        code = err.get("code") if isinstance(err, dict) else None
        if refuses_feature(ex.status, str(message or ""), code):
            declarable = capability in FEATURES
            hint = f" (declare the target without {capability} to make this not applicable)" if declarable else ""
            raise Skipped(
                f"the server refuses {capability}: HTTP {ex.status} {str(message)[:200]!r}{hint}",
                [
                    Evidence(
                        expected=f"{capability} served, or the target declared without it",
                        seen=f"HTTP {ex.status}",
                        offending=_body_excerpt(ex),
                        request=ex.request_summary(),
                    )
                ],
            )

    def field_issues(self, message: str, issues: list[FieldIssue], ex: Exchange, offending: Any) -> CheckFailed:
        return CheckFailed(
            message,
            [
                Evidence(
                    expected=i.expected, seen=i.seen, where=i.path, offending=offending, request=ex.request_summary()
                )
                for i in issues[:10]
            ],
        )

    def expect_client_error(self, ex: Exchange, allowed: tuple[int, ...] = (400,), what: str = "request") -> None:
        """A bad request must be refused with the right 4xx and a message the
        client can show. Where the message sits (`error.message`, a string
        `error`, or a flat top-level `message`) is judged once, by
        `errors.envelope`, so one shape deviation does not fail every check."""
        self._require_status(ex, what, allowed)
        if not error_message(ex.json()):
            raise self.fail(
                f"{what}: HTTP {ex.status} without an error message",
                expected='a JSON body {"error": {"message": "..."}}',
                seen=_body_excerpt(ex),
                exchange=ex,
            )

    def envelope_issues(self, ex: Exchange) -> list[FieldIssue]:
        issues = error_envelope_issues(ex.json())
        if not ex.content_type.startswith("application/json"):
            issues.append(FieldIssue("header content-type", "application/json", ex.content_type or "<none>"))
        return issues

    @staticmethod
    def skip(reason: str) -> Skipped:
        return Skipped(reason)


def error_message(body: Any) -> str | None:
    """The human-readable message of an error body in any of the shapes
    runtimes use, or None."""
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"]:
        return err["message"]
    if isinstance(err, str) and err:
        return err
    if isinstance(body.get("message"), str) and body["message"]:
        return body["message"]
    return None


def refuses_feature(status: int, message: str, code: Any) -> bool:
    """Whether an error says "this server cannot do that" rather than "your
    request is wrong": our gateway's `unsupported_by_runtime`, HTTP 501, or a
    runtime's own wording (vLLM: "... requires --tool-call-parser ...")."""
    text = message.lower()
    return status in (400, 501) and (
        code == "unsupported_by_runtime" or status == 501 or "not support" in text or "requires --" in text
    )


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


DROP: Any = _Drop()  # pass as an override to remove a default key from the body
_DROP = DROP


def _body_excerpt(ex: Exchange, limit: int = 600) -> str:
    text = ex.raw.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "..."


def body_excerpt(ex: Exchange, limit: int = 600) -> str:
    return _body_excerpt(ex, limit)
