"""TGI's refusals before generation: serde type errors (axum's plain-text 422),
the router's parameter checks (`validation.rs`, JSON 422s) and queue admission
(429 above `--max-concurrent-requests`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from simulators.options import SimOptions
from simulators.request import SimRequest
from simulators.structured_requests import ConstraintRefused, TgiGrammarRejected, tgi_constraint, tgi_grammar_shape
from simulators.tgi_wire import TgiError, rejection
from simulators.validation import check_body

MAX_CLIENT_BATCH_SIZE = 4
_STATUS_TYPES = {422: "validation", 424: "generation", 429: "overloaded", 500: "incomplete_generation"}


@dataclass(frozen=True, slots=True)
class Limits:
    max_input_tokens: int
    max_total_tokens: int
    max_stop_sequences: int
    max_concurrent_requests: int

    @classmethod
    def of(cls, opts: SimOptions) -> Limits:
        return cls(opts.max_model_len - 1, opts.max_model_len, opts.max_stop_sequences, opts.max_concurrent_requests)


def type_check(body: dict[str, Any], kind: str) -> web.Response | None:
    """Serde type errors in an OpenAI chat or completions body become axum's plain-text 422."""
    if kind == "chat" and not isinstance(body.get("messages"), list):
        return rejection("missing field `messages` at line 1 column 2")
    if kind == "completion" and not isinstance(body.get("prompt"), (str, list)):
        return rejection("missing field `prompt` at line 1 column 2")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, list):
        return rejection(
            f"stop: invalid type: string {orjson.dumps(stop).decode()}, expected a sequence at line 1 column 2"
        )
    bias = body.get("logit_bias")
    if bias is not None and not isinstance(bias, list):
        return rejection("logit_bias: invalid type: map, expected a sequence at line 1 column 2")
    if kind == "chat" and body.get("response_format") is not None:
        refused = grammar_rejection("response_format", body["response_format"])
        if refused is not None:
            return refused
    for problem in check_body(body, kind):
        if problem.kind != "greater_than_equal":  # ranges are validation.rs's job, as JSON 422s
            return rejection(
                f"{problem.loc}: invalid type: {orjson.dumps(problem.value).decode()}, "
                f"expected {problem.kind.removesuffix('_type')} at line 1 column 2"
            )
    return None


def grammar_rejection(field: str, grammar: Any) -> web.Response | None:
    """Serde's refusal of a `GrammarType` that does not deserialize (axum's plain-text 422)."""
    try:
        tgi_grammar_shape(field, grammar)
    except TgiGrammarRejected as exc:
        return rejection(f"{exc} at line 1 column 2")
    return None


def check_grammar(sim: SimRequest, grammar: Any) -> None:
    """validation.rs's check of the grammar; the constraint goes on `sim`."""
    if grammar is None:
        return
    try:
        sim.constraint = tgi_constraint(grammar)
    except ConstraintRefused as exc:
        raise TgiError(422, f"Input validation error: {exc.message}", "validation") from exc


def admit(sim: SimRequest, in_flight: int, limits: Limits) -> None:
    """Raise the refusal of a request the queue does not take (or a status fault)."""
    f = sim.faults
    if f.status is not None and f.status >= 400:
        raise TgiError(f.status, f"Simulated failure with status {f.status}", _STATUS_TYPES.get(f.status, "generation"))
    if f.overloaded or in_flight >= limits.max_concurrent_requests:
        raise TgiError(429, "Model is overloaded", "overloaded")


def check_parameters(sim: SimRequest, top_p: Any, temperature: Any, max_new: int | None, limits: Limits) -> None:
    """Raise validation.rs's refusal of the sampling parameters or the prompt length; a
    request without `max_new_tokens` gets the room left in the context."""
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0.0 < top_p < 1.0):
        raise TgiError(422, "Input validation error: `top_p` must be > 0.0 and < 1.0", "validation")
    if isinstance(temperature, (int, float)) and temperature < 0:
        raise TgiError(422, "Input validation error: `temperature` must be strictly positive", "validation")
    if len(sim.stop) > limits.max_stop_sequences:
        raise TgiError(
            422,
            f"Input validation error: `stop` supports up to {limits.max_stop_sequences} "
            f"stop sequences. Given: {len(sim.stop)}",
            "validation",
        )
    if max_new is not None and max_new < 1:
        raise TgiError(422, "Input validation error: `max_new_tokens` must be strictly positive", "validation")
    n = sim.context_tokens
    if n >= limits.max_input_tokens:
        raise TgiError(
            422,
            f"Input validation error: `inputs` must have less than {limits.max_input_tokens} tokens. Given: {n}",
            "validation",
        )
    if max_new is not None and n + max_new > limits.max_total_tokens:
        raise TgiError(
            422,
            f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
            f"{limits.max_total_tokens}. Given: {n} `inputs` tokens and {max_new} "
            f"`max_new_tokens`",
            "validation",
        )
    if max_new is None:
        sim.max_tokens = limits.max_total_tokens - n
