"""Readers for the fields OpenAI requests share: one typed value each, from the
body as sent, with the spec's range; every mistake answers 400 naming the param."""

from __future__ import annotations

from typing import Any

from adapters.base import SAMPLING_PARAMETERS, SamplingParams
from adapters.errors import GatewayError, invalid_request

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# JSON's names for the Python types a parsed body holds, as OpenAI's messages say them.
JSON_TYPES = {str: "a string", int: "an integer", float: "a decimal", list: "an array", dict: "an object"}


def shown(value: Any) -> str:
    """A client value quoted in an error message, clipped: a hostile request must not
    make the message (or the log line that carries it) arbitrarily large."""
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 64 else text[:61] + "..."


def shown_key(key: str) -> str:
    """A client-chosen object key inside a `param`, clipped."""
    return key if len(key) <= 64 else key[:64] + "..."


def invalid_type(name: str, expected: str, value: Any) -> GatewayError:
    """A field of the wrong JSON type: OpenAI's `invalid_type`."""
    got = "a boolean" if isinstance(value, bool) else JSON_TYPES.get(type(value), "null")
    return invalid_request(
        f"Invalid type for '{name}': expected {expected}, but got {got} instead.", param=name, code="invalid_type"
    )


def out_of_range(name: str, kind: str, lo: float, hi: float, value: float) -> GatewayError:
    """A number outside its range: OpenAI's `{integer,decimal}_{below_min,above_max}_value`,
    naming the bound it crossed."""
    below = value < lo
    limit = lo if below else hi
    said = str(int(limit)) if kind == "integer" else f"{limit:g}"
    side, bound = ("below minimum", f">= {said}") if below else ("above maximum", f"<= {said}")
    code = f"{kind}_{'below_min' if below else 'above_max'}_value"
    return invalid_request(
        f"Invalid '{name}': {kind} {side} value. Expected a value {bound}, but got {shown(value)} instead.",
        param=name,
        code=code,
    )


def number(body: dict, name: str, lo: float, hi: float) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise invalid_type(name, "a decimal", v)
    if not lo <= v <= hi:
        raise out_of_range(name, "decimal", lo, hi, v)
    return float(v)


def integer(body: dict, name: str, lo: int, hi: int, *, what: str = "an integer") -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise invalid_type(name, what, v)
    if not lo <= v <= hi:
        raise out_of_range(name, "integer", lo, hi, v)
    return v


def query_int(value: str, name: str, lo: int, hi: int) -> int:
    """A query parameter's integer, read strictly: ASCII digits only (no sign, space,
    `²` or `٣`, which `str.isdigit` or `int()` would take or choke on), at most as
    many as `hi` has; anything else is a 400 naming the parameter."""
    if not (value and value.isascii() and value.isdigit()):
        raise invalid_type(name, "an integer", value)
    number = int(value) if len(value) <= len(str(hi)) else hi + 1
    if not lo <= number <= hi:
        raise out_of_range(name, "integer", lo, hi, number)
    return number


def boolean(body: dict, name: str) -> bool | None:
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise invalid_request(f"'{name}' must be a boolean, not {type(v).__name__}.", param=name)
    return v


def model_name(body: dict) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_request("'model' is required and must be a non-empty string.", param="model")
    return model


def stop_sequences(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise invalid_request("'stop' must be a string or an array of strings.", param="stop")
    if len(stop) > 4:
        raise invalid_request(f"'stop' may hold at most 4 sequences; got {len(stop)}.", param="stop")
    return [s for s in stop if s]


def logit_bias(body: dict) -> dict[int, float] | None:
    lb = body.get("logit_bias")
    if lb is None:
        return None
    if not isinstance(lb, dict):
        raise invalid_request("'logit_bias' must be an object mapping token ids to biases.", param="logit_bias")
    out: dict[int, float] = {}
    for k, v in lb.items():
        try:
            token = int(k)
        except ValueError:
            raise invalid_request(
                f"'logit_bias' keys must be token ids (integers as strings); got {shown(k)}.", param="logit_bias"
            ) from None
        if token < 0:
            raise invalid_request(f"'logit_bias' has a negative token id {token}.", param="logit_bias")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -100 <= v <= 100:
            raise invalid_request(
                f"'logit_bias' values must be numbers between -100 and 100; got {shown(v)} for {shown(k)}.",
                param="logit_bias",
            )
        out[token] = float(v)
    return out


def token_ids(body: dict, name: str) -> list[int]:
    v = body.get(name)
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in v):
        raise invalid_request(f"'{name}' must be an array of non-negative token ids.", param=name)
    return v


def stream_options(body: dict) -> tuple[bool, bool]:
    stream = bool(boolean(body, "stream"))
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise invalid_request("'stream_options' is only allowed when 'stream' is true.", param="stream_options")
        if not isinstance(options, dict):
            raise invalid_request("'stream_options' must be an object.", param="stream_options")
        iu = options.get("include_usage")
        if iu is not None and not isinstance(iu, bool):
            raise invalid_request(
                "'stream_options.include_usage' must be a boolean.", param="stream_options.include_usage"
            )
        include_usage = bool(iu)
    return stream, include_usage


# The fields `sampling_params` reads (max_tokens and logprobs are read by the caller). A
# body sending none of them gets SamplingParams' own defaults (a test holds both to it):
# most requests send few, and fourteen reads cost more than the check.
SAMPLING_FIELDS = frozenset(SAMPLING_PARAMETERS) - {"max_tokens", "logprobs"}


def sampling_params(body: dict, *, max_tokens: int | None) -> SamplingParams:
    if SAMPLING_FIELDS.isdisjoint(body):
        return SamplingParams(max_tokens=max_tokens)
    return SamplingParams(
        temperature=number(body, "temperature", 0, 2),
        top_p=number(body, "top_p", 0, 1),
        top_k=integer(body, "top_k", -1, 1 << 31),
        min_p=number(body, "min_p", 0, 1),
        presence_penalty=number(body, "presence_penalty", -2, 2),
        frequency_penalty=number(body, "frequency_penalty", -2, 2),
        repetition_penalty=number(body, "repetition_penalty", 0.01, 10),
        logit_bias=logit_bias(body),
        seed=integer(body, "seed", INT64_MIN, INT64_MAX),
        n=integer(body, "n", 1, 128) or 1,
        stop=stop_sequences(body),
        stop_token_ids=token_ids(body, "stop_token_ids"),
        max_tokens=max_tokens,
        min_tokens=integer(body, "min_tokens", 0, 1 << 31) or 0,
        ignore_eos=bool(boolean(body, "ignore_eos")),
    )


def extra_fields(body: dict, known: set[str]) -> dict[str, Any]:
    if body.keys() <= known:  # most bodies: every field read, nothing to pass on
        return {}
    return {k: v for k, v in body.items() if k not in known}


def unknown_parameter(name: str) -> GatewayError:
    """A field OpenAI's API does not define, refused (OpenAI's words and code)."""
    clipped = shown_key(name)
    return invalid_request(f"Unknown parameter: '{clipped}'.", param=clipped, code="unknown_parameter")


def refuse_unknown(unknown: tuple[str, ...], policy: str) -> None:
    """The model's `unknown_params` policy, for every generating route: `pass` lets
    fields OpenAI does not define through (chat and completions hand them to runtimes
    that read them, such as vLLM's `chat_template_kwargs`; the Responses API ignores
    them), `reject` answers 400 `unknown_parameter` naming the first."""
    if unknown and policy == "reject":
        raise unknown_parameter(unknown[0])
