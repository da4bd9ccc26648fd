"""The canonical contract between the gateway and every runtime adapter: one
`GenerationRequest` in, the events below out (the gateway's encoder is the only code
that writes OpenAI JSON). Closing the iterator `generate` returns, or cancelling the task
that iterates it, aborts the work upstream and releases everything the adapter holds
(docs/architecture.md, "The contract").
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from adapters.errors import GatewayError
from adapters.oneshot import (
    DetokenizeRequest,
    DetokenizeResult,
    EmbeddingRequest,
    EmbeddingResult,
    TokenizeRequest,
    TokenizeResult,
)

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
FINISH_REASONS: frozenset[str] = frozenset({"stop", "length", "tool_calls", "content_filter"})


@dataclass(slots=True)
class SamplingParams:
    """Sampling and stopping. `None` means "the runtime's default"."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    n: int = 1
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    max_tokens: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0


@dataclass(slots=True)
class GenerationRequest:
    """One generation, runtime-neutral.

    `kind` tells chat (`messages`) from legacy completions (`prompt`, a string or
    a list of token ids). `model` is the name the tenant sent; the adapter maps it
    to its backend's served model. `extra` carries request fields the gateway does
    not interpret, passed through to runtimes that understand them.
    `request_id` is the gateway's own, unique and unguessable (never a client's
    id): adapters name the upstream generation after it (SGLang's `rid`, vLLM's
    request id, the engine's sequences), and may abort by it.
    """

    request_id: str
    model: str
    kind: Literal["chat", "completion"] = "chat"
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    tenant: str | None = None
    deadline: float | None = None  # time.monotonic() after which the work is useless
    priority: int = 0
    # The model's policy for a parameter the runtime rejects (`ParameterSupport`):
    # refuse the request (400), or drop the parameter and say so.
    unsupported_params: Literal["reject", "drop"] = "reject"
    extra: dict[str, Any] = field(default_factory=dict)
    # Top-level request fields OpenAI's API does not define (passed on in `extra` on chat
    # and completions, ignored by the Responses API); the model's `unknown_params` policy
    # refuses them or lets them pass (gateway/openai/request_fields.py `refuse_unknown`).
    unknown_fields: tuple[str, ...] = ()
    # Explicit conversation keys the client sent, by source ("x-session-id",
    # "prompt_cache_key", "user"); routing's session affinity picks one per model.
    session_keys: dict[str, str] = field(default_factory=dict)
    # The W3C trace context of this upstream attempt (`traceparent`, `tracestate`) as
    # header pairs, sent with every call about this generation (its abort included);
    # empty when the request is not traced.
    trace_headers: tuple[tuple[str, str], ...] = ()


# ---- events an adapter yields ------------------------------------------------
#
# An adapter decodes its runtime faithfully and need not enforce the stream rules
# (docs/architecture.md, "Stream rules and their one owner"): gateway/serving/stream_guard.py
# makes them true once for every adapter, on the stream the dispatcher returns.


def total_choices(requests: list[GenerationRequest]) -> int:
    """The upstream generations one request starts: its prompts' choices summed (a legacy
    completion with k prompts and n each makes k * n). The one count the choices cap,
    admission, the stream guard and the answer read."""
    if len(requests) == 1:  # nearly every request: no generator to sum over
        return requests[0].sampling.n
    return sum(r.sampling.n for r in requests)


@dataclass(slots=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: list[int] | None = None


@dataclass(slots=True)
class TokenLogprob:
    """The chosen token's log probability and the `top` alternatives. `logprob`
    is None only for an echoed first prompt token, which has no probability
    (legacy completions send `null` there; chat never has such a token)."""

    token: str
    logprob: float | None
    bytes: list[int] | None = None
    top: list[TopLogprob] = field(default_factory=list)


@dataclass(slots=True)
class TextDelta:
    """New text for choice `index`; `logprobs` covers the tokens behind `text`."""

    index: int
    text: str
    logprobs: list[TokenLogprob] | None = None


@dataclass(slots=True)
class LogprobsDelta:
    """Log probabilities for tokens that produced no visible text (held back,
    e.g. by stop-string matching). The encoder sends them with empty content."""

    index: int
    logprobs: list[TokenLogprob]


@dataclass(slots=True)
class ToolCallDelta:
    """A piece of tool call `tool_index` of choice `index`.

    Adapters pass on what the runtime sent (a repeated or placeholder `id`/`name`
    included); the stream guard gives each call one id and its name once. `arguments`
    is always a JSON text fragment.
    """

    index: int
    tool_index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class Finish:
    index: int
    reason: FinishReason


@dataclass(slots=True)
class Usage:
    """Token counts for the whole request (all choices)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class ErrorEvent:
    """A failure the runtime reported inside a stream it had already started."""

    error: GatewayError


Event = TextDelta | LogprobsDelta | ToolCallDelta | Finish | Usage | ErrorEvent


# ---- what an adapter declares and reports -----------------------------------


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the runtime does natively. The gateway emulates or rejects the rest."""

    tools: bool = True
    parallel_tool_calls: bool = True
    n: bool = True  # n > 1 in one request
    logprobs: bool = True
    structured_output: bool = True
    cached_tokens: bool = False  # reports prompt_tokens_details.cached_tokens
    explicit_abort: bool = False  # has an abort call beyond closing the connection
    completions: bool = True  # legacy /v1/completions
    # The one-shot calls (adapters/oneshot.py); off unless the
    # runtime, as configured, serves them.
    embeddings: bool = False  # /v1/embeddings
    tokenize: bool = False  # /tokenize and /detokenize


# The sampling parameters whose support may differ by runtime (`SamplingParams`
# fields), in the order docs/adapters.md lists them.
SAMPLING_PARAMETERS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "seed",
    "n",
    "stop",
    "stop_token_ids",
    "max_tokens",
    "min_tokens",
    "ignore_eos",
    "logprobs",
)


@dataclass(frozen=True, slots=True)
class ParameterSupport:
    """What the runtime does with each sampling parameter: passes it on (those not
    listed), emulates it (`emulated`: name -> how), or cannot apply it as asked
    (`rejected`: name -> why), which is refused or dropped as the request's
    `unsupported_params` says. docs/adapters.md shows every runtime's table."""

    emulated: Mapping[str, str] = field(default_factory=dict)
    rejected: Mapping[str, str] = field(default_factory=dict)

    def support(self, name: str) -> Literal["pass", "emulate", "reject"]:
        if name in self.rejected:
            return "reject"
        return "emulate" if name in self.emulated else "pass"

    def unsupported(self, sampling: SamplingParams) -> list[str]:
        """The rejected parameters `sampling` asks something of, in table order.
        Their neutral values ask nothing: 0, false, empty, a top_k of 0 or less
        (no top-k cut) and an n of 1."""
        if not self.rejected:
            return []  # most runtimes: nothing to look at, on every request
        return [name for name in SAMPLING_PARAMETERS if name in self.rejected and _asks(sampling, name)]


def _asks(sampling: SamplingParams, name: str) -> bool:
    value = getattr(sampling, name)
    if name == "top_k":
        return value is not None and value > 0
    if name == "n":
        return value > 1  # one choice is what every runtime gives
    return bool(value)


@dataclass(slots=True)
class LoadSnapshot:
    """A runtime's load, normalized. `None` fields are unknown for this runtime."""

    waiting: int | None = None
    running: int | None = None
    kv_usage: float | None = None  # 0..1
    prefix_hit_rate: float | None = None  # 0..1
    read_at: float = field(default_factory=time.time)


@dataclass(slots=True)
class Health:
    ok: bool
    detail: str = ""


class Adapter(ABC):
    """One backend. Instances are long-lived and shared by concurrent requests."""

    capabilities: Capabilities = Capabilities()
    parameters: ParameterSupport = ParameterSupport()  # every sampling parameter passes
    runtime: str  # what serves it, as users know it ("vLLM", "native engine"): named in errors and traces

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        """Stream canonical events for `request`.

        Raises `GatewayError` for failures; a failure before the first event (raised,
        or an `ErrorEvent` as the first event) may be retried elsewhere when
        it carries a `failure` kind. Closing or cancelling the iterator aborts the upstream
        work (see module docstring). Every choice should end with a `Finish` and
        `Usage` come last when the runtime knows it.
        """

    @abstractmethod
    async def health(self) -> Health: ...

    async def load(self) -> LoadSnapshot:
        return LoadSnapshot()

    @abstractmethod
    async def models(self) -> list[str]: ...

    async def aclose(self) -> None:
        return None

    # ---- one-shot calls: only routed to adapters whose capabilities say so ----

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        raise _not_served(self, "embeddings")

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        raise _not_served(self, "tokenize")

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResult:
        raise _not_served(self, "detokenize")


def _not_served(adapter: Adapter, what: str) -> GatewayError:
    return GatewayError(
        400, f"The backend serving this model does not serve {what}.", param="model", code="unsupported_by_runtime"
    )
