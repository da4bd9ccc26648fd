"""The `native` adapter: the in-process paged-KV engine behind the canonical contract.

Text work happens here, around a token-level engine: chat messages (with tools)
are rendered by the model's chat template and tokenized; each choice's generated
tokens go through an incremental detokenizer, then stop-string matching (text
that may begin a stop string is held back; a match ends the choice with "stop"),
then, when the request has tools, a tool-call reader: the free-text hermes parser
for `tool_choice` "auto", the grammar-shaped ForcedToolCallReader when the grammar
forces the calls (see docs/structured-output.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson

import engine.block_pool as engine_kv
from adapters.base import (
    Adapter,
    Capabilities,
    Event,
    GenerationRequest,
    Health,
    LoadSnapshot,
    SamplingParams,
    TextDelta,
    Usage,
)
from adapters.errors import GatewayError, context_length_exceeded, invalid_request, prompt_param, upstream_failed
from adapters.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from adapters.native_choice import ChoiceEvents, tool_stage
from adapters.native_oneshot import NativeOneShot, check_context, request_text_bytes
from adapters.native_work import TEXT_WORK
from engine.builtin import BUILTIN_PREFIX, resolve_model_path

# The engine's own sampling parameters (the canonical ones are adapters.base.SamplingParams).
from engine.sampling_params import SamplingParams as EngineSamplingParams
from engine.text.chat_template import ChatTemplateError
from engine.text.forced_tool_calls import ToolCallFormatError
from engine.text.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)

RECENT_PROMPTS = 256  # prompts whose token ids a model directory's tokenizer keeps
# Routing names blocks on the event loop (`kv_block_hashes`) for prompts up to this many
# bytes of text only; longer ones are matched approximately (tokenized off the loop later).
ROUTE_TEXT_BYTES = 8192


class SharedTokenizer:
    """One model directory's tokenizer, one object for every native backend that loads
    it, and the token ids of the prompts it rendered last: precise routing names a
    prompt's blocks (`kv_block_hashes`, about 1 ms on the event loop) before the backend
    it picks would tokenize it again. Ids are reused only by the tokenizer object that
    computed them, for a prompt equal, byte for byte as JSON, to theirs."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer
        self.recent: OrderedDict[bytes, list[int]] = OrderedDict()
        self.reused = 0  # prompts not tokenized again (tests, and to see it work)

    def remember(self, key: bytes | None, ids: list[int]) -> None:
        """Keep a copy of `ids` for the prompt `key`, the last RECENT_PROMPTS of them."""
        if key is not None:
            self.recent[key] = list(ids)
            if len(self.recent) > RECENT_PROMPTS:
                self.recent.popitem(last=False)


_SHARED: dict[tuple, SharedTokenizer] = {}
_SHARED_LOCK = threading.Lock()  # engines are built in threads (asyncio.to_thread)


def shared_tokenizer(model_dir: Path) -> SharedTokenizer:
    """The tokenizer of `model_dir`, loaded once per process while its files are unchanged."""
    files = ("tokenizer.json", "tokenizer_config.json", "config.json", "chat_template.jinja")
    stamp = tuple((f, (model_dir / f).stat().st_mtime_ns) for f in files if (model_dir / f).is_file())
    key = (str(model_dir.resolve()), stamp)
    with _SHARED_LOCK:
        if key not in _SHARED:
            tokenizer = TextTokenizer(model_dir)
            tokenizer.token_bytes(0)  # builds the per-token byte table here, off the event loop
            _SHARED[key] = SharedTokenizer(tokenizer)
        return _SHARED[key]


def _prompt_key(request: GenerationRequest) -> bytes | None:
    """What a prompt's token ids depend on; None where there is nothing to save (ids sent)."""
    if request.kind == "completion" and not isinstance(request.prompt, str):
        return None
    try:
        return orjson.dumps([request.kind, request.messages, request.tools, request.prompt])
    except TypeError:
        return None  # not JSON: tokenized each time


class NativeAdapter(NativeOneShot, Adapter):
    # Everything: the defaults plus what only our own engine reports or serves.
    capabilities = Capabilities(cached_tokens=True, explicit_abort=True, embeddings=True, tokenize=True)
    runtime = "native engine"

    def __init__(
        self,
        name: str,
        model_path: str,
        *,
        served_name: str | None = None,
        engine_options: dict | None = None,
        registry: Any = None,
    ) -> None:
        super().__init__(name)
        self.model_path = model_path
        self.served_name = served_name or _default_served_name(model_path)
        self.engine_options = dict(engine_options or {})
        self._registry = registry
        self._start_lock = asyncio.Lock()
        self.tokenizer: TextTokenizer | None = None
        self._shared: SharedTokenizer | None = None
        self.async_engine: Any = None  # engine.async_engine.AsyncEngine once started
        self._kv_sink: Callable[[KVEvent], None] | None = None

    # ---- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        """Load the model and start the engine (once; later calls return at once)."""
        if self.async_engine is not None:
            return
        async with self._start_lock:
            if self.async_engine is not None:
                return
            try:
                shared, self.async_engine = await asyncio.to_thread(self._build)
                self._shared, self.tokenizer = shared, shared.tokenizer
            except Exception as exc:
                raise upstream_failed(
                    self.name, "the model could not be loaded", status=503, internal=f"{self.model_path}: {exc}"
                ) from exc
            if self._kv_sink is not None:
                self.subscribe_kv_events(self._kv_sink)

    def _build(self) -> tuple[SharedTokenizer, Any]:
        from engine.async_engine import AsyncEngine
        from engine.llm_engine import LLMEngine

        model_dir = resolve_model_path(self.model_path)
        tokenizer = shared_tokenizer(model_dir)
        try:
            engine = LLMEngine(str(model_dir), **self.engine_options)
        except TypeError as exc:
            raise ValueError(f"bad engine_options {sorted(self.engine_options)}: {exc}") from exc
        return tokenizer, AsyncEngine(engine, registry=self._registry, name=self.name)

    async def aclose(self) -> None:
        if self.async_engine is not None:
            await self.async_engine.shutdown()

    async def health(self) -> Health:
        try:
            await self.start()
        except GatewayError as exc:
            # For the operator (readiness), unlike the tenant's message: what failed to load and why.
            return Health(ok=False, detail=f"cannot load {self.model_path}: {exc.__cause__ or exc.message}")
        return Health(ok=True, detail=f"native engine serving {self.served_name}")

    async def load(self) -> LoadSnapshot:
        if self.async_engine is None:
            return LoadSnapshot()
        stats = self.async_engine.stats()
        return LoadSnapshot(
            waiting=stats.waiting, running=stats.running, kv_usage=stats.kv_usage, prefix_hit_rate=stats.prefix_hit_rate
        )

    async def models(self) -> list[str]:
        return [self.served_name]

    def subscribe_kv_events(self, sink: Callable[[KVEvent], None]) -> None:
        """Hand `sink` (the one subscriber) each prefix-cache event of the engine as the
        contract's event (adapters/kv_events.py), on the engine's thread: only hand it off."""
        self._kv_sink = sink
        if self.async_engine is None:
            return  # attached when the engine starts
        engine = self.async_engine.engine
        size = engine.config.block_size

        def publish(e: engine_kv.KVCacheEvent) -> None:
            if isinstance(e, engine_kv.BlockStored):
                sink(BlockStored((e.block_hash,), e.parent_block_hash, size, "GPU"))
            elif isinstance(e, engine_kv.BlockRemoved):
                sink(BlockRemoved((e.block_hash,), "GPU"))
            else:
                sink(AllBlocksCleared())

        engine.pool.event_sink = publish

    def kv_block_hashes(self, request: GenerationRequest) -> list[int] | None:
        """The names the engine's prefix cache gives the request's full prompt blocks (its
        tokenizer and chain hash); None before the engine is loaded or for a bad prompt."""
        if self.async_engine is None:
            return None
        assert self._shared is not None
        key = _prompt_key(request)
        if (key is None or key not in self._shared.recent) and request_text_bytes(request) > ROUTE_TEXT_BYTES:
            return None  # not on the event loop: the request's own tokenizing runs off it
        try:
            ids = self._prompt_ids(request)
        except GatewayError:
            return None
        return self.async_engine.engine.kv.block_hashes(ids)

    # ---- one request --------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        await self.start()
        assert self.tokenizer is not None
        tok = self.tokenizer
        engine = self.async_engine.engine
        prompt_ids = await self._tokenized_prompt(request, engine.max_model_len)
        # A sequence can grow no longer than the model's context or the whole KV cache.
        capacity = min(engine.max_model_len, engine.pool.num_blocks * engine.config.block_size)
        params = self._engine_params(request, len(prompt_ids), capacity)
        params.allowed_tokens_fn = await self._grammar_mask(request, engine)
        sampling = request.sampling
        forced = _forces_tool_calls(request)
        if forced:
            # The answer is the calls and nothing else: a stop string or stop token could
            # only cut one in half, so neither applies (the grammar ends on EOS by itself).
            params.stop_token_ids = []
        choices = [
            ChoiceEvents(
                i,
                tok,
                [] if forced else sampling.stop,
                params.stop_token_ids,
                engine.eos_token_ids,
                tool_stage(request, forced),
                request.request_id,
            )
            for i in range(params.n)
        ]

        if request.echo and request.kind == "completion":
            echo = tok.decode(prompt_ids, skip_special_tokens=False)
            for choice in choices:
                yield TextDelta(choice.index, echo)

        engine_id = f"{request.request_id}-{uuid.uuid4().hex[:8]}"
        stream = self.async_engine.generate(engine_id, prompt_ids, params, request.priority)
        outputs = _engine_errors(stream, self.name, request.kind)
        cached_tokens = 0
        try:
            async for out in outputs:
                choice = choices[out.index]
                if choice.done:
                    continue  # a stop string already ended this choice; its extra tokens are dropped
                cached_tokens = max(cached_tokens, out.num_cached_tokens)
                try:
                    events = choice.step(out, sampling.logprobs)
                except ToolCallFormatError as exc:
                    raise upstream_failed(self.name, f"forced tool-call output left its grammar: {exc}", 500) from exc
                for event in events:
                    yield event
                if all(c.done for c in choices):
                    break  # leaving the loop closes the stream, which aborts what still runs
        finally:
            await outputs.aclose()
            await stream.aclose()
        yield Usage(
            prompt_tokens=len(prompt_ids),
            completion_tokens=sum(c.num_tokens for c in choices),
            cached_tokens=cached_tokens,
        )

    # ---- structured output (the logic lives in engine/structured/) ----

    async def _grammar_mask(self, request: GenerationRequest, engine: Any) -> Any:
        """The grammar mask for response_format / forced tool calls, or None for free text.
        A schema the grammar engine cannot honour is a 400 here, before any generation."""
        forced_tools = _forces_tool_calls(request)
        wants_json = isinstance(request.response_format, dict) and request.response_format.get("type") != "text"
        if not (forced_tools or wants_json):
            return None
        try:
            from engine.structured import GrammarMask, SchemaError, grammar_tokenizer, plan_structured
        except ImportError as exc:
            raise invalid_request(
                f"structured output needs the grammar library: {exc}",
                param="response_format" if wants_json else "tool_choice",
            ) from exc
        vocab = engine.model_config.vocab_size
        tokenizer = self.tokenizer
        assert tokenizer is not None  # generate() started the engine

        def plan() -> Any:  # compiling a large schema can take a while: off the event loop
            return plan_structured(
                grammar_tokenizer(tokenizer, vocab, engine.eos_token_ids),
                response_format=request.response_format,
                tools=request.tools,
                tool_choice=request.tool_choice,
                parallel_tool_calls=request.parallel_tool_calls,
            )

        try:
            structured = await asyncio.to_thread(plan)
        except SchemaError as exc:
            raise GatewayError(400, exc.message, param=exc.param, code="invalid_schema") from exc
        return None if structured is None else GrammarMask(structured.matcher, vocab, engine.eos_token_ids)

    def _prompt_ids(self, request: GenerationRequest) -> list[int]:
        """The prompt's token ids: reused where this tokenizer computed them for the same
        prompt (at routing, by `kv_block_hashes` of any backend sharing it), else computed."""
        shared = self._shared
        assert shared is not None
        key = _prompt_key(request)
        if key is not None and (ids := shared.recent.get(key)) is not None:
            shared.recent.move_to_end(key)
            shared.reused += 1
            return list(ids)  # a copy: the engine's sequence is not the cache's
        ids = self._compute_prompt_ids(request, shared.tokenizer)
        shared.remember(key, ids)
        return ids

    async def _tokenized_prompt(self, request: GenerationRequest, max_model_len: int) -> list[int]:
        """`_prompt_ids` off the event loop, on the tenant's share of adapters/native_work.py,
        after the cheap context cap; ids routing computed are reused as they are."""
        shared = self._shared
        assert shared is not None
        key = _prompt_key(request)
        if key is not None and key in shared.recent:
            return self._prompt_ids(request)
        check_context(shared.tokenizer, max_model_len, request_text_bytes(request), prompt_param(request.kind))
        ids = await TEXT_WORK.run(request.tenant, lambda: self._compute_prompt_ids(request, shared.tokenizer))
        shared.remember(key, ids)
        return ids

    def _compute_prompt_ids(self, request: GenerationRequest, tok: TextTokenizer) -> list[int]:
        if request.kind == "chat":
            if not request.messages:
                raise invalid_request("messages must be a non-empty list", param="messages")
            try:
                text = tok.apply_chat_template(
                    request.messages, tools=request.tools or None, add_generation_prompt=True
                )
            except ChatTemplateError as exc:
                raise invalid_request(str(exc), param="messages") from exc
            ids = tok.encode(text, add_special_tokens=False)
        elif isinstance(request.prompt, str):
            ids = tok.encode(request.prompt, add_special_tokens=True)
        elif isinstance(request.prompt, list) and all(isinstance(i, int) for i in request.prompt):
            ids = list(request.prompt)
            if any(i < 0 or i >= tok.vocab_size for i in ids):
                raise invalid_request(f"prompt token ids must be in [0, {tok.vocab_size})", param="prompt")
        else:
            raise invalid_request("prompt must be a string or a list of token ids", param="prompt")
        if not ids:
            raise invalid_request("the prompt is empty", param=prompt_param(request.kind))
        return ids

    def _engine_params(self, request: GenerationRequest, prompt_len: int, max_model_len: int) -> EngineSamplingParams:
        s: SamplingParams = request.sampling
        field = prompt_param(request.kind)
        if prompt_len >= max_model_len:
            raise context_length_exceeded(
                f"This model's maximum context length is {max_model_len} tokens. However, your {field} resulted "
                f"in {prompt_len} tokens. Please reduce the length of the {field}.",
                request.kind,
            )
        if request.echo and s.logprobs:
            raise invalid_request(
                "echo with logprobs (prompt logprobs) is not supported by the native engine", param="echo"
            )
        max_tokens = s.max_tokens if s.max_tokens is not None else max_model_len - prompt_len
        if prompt_len + max_tokens > max_model_len:
            raise context_length_exceeded(
                f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the {field}, {max_tokens} in the completion). "
                f"Please reduce the length of the {field} or completion.",
                request.kind,
            )
        vocab = self.tokenizer.vocab_size if self.tokenizer else 0
        for token_id in list(s.logit_bias or {}) + list(s.stop_token_ids):
            if not 0 <= token_id < vocab:
                raise invalid_request(
                    f"token id {token_id} is outside the vocabulary [0, {vocab})",
                    param="logit_bias" if token_id in (s.logit_bias or {}) else "stop_token_ids",
                )
        params = EngineSamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if s.temperature is None else s.temperature,
            top_p=1.0 if s.top_p is None else s.top_p,
            top_k=0 if s.top_k is None or s.top_k < 0 else s.top_k,
            min_p=s.min_p or 0.0,
            presence_penalty=s.presence_penalty or 0.0,
            frequency_penalty=s.frequency_penalty or 0.0,
            repetition_penalty=1.0 if s.repetition_penalty is None else s.repetition_penalty,
            logit_bias=dict(s.logit_bias) if s.logit_bias else None,
            seed=s.seed,
            n=s.n,
            stop_token_ids=list(s.stop_token_ids),
            ignore_eos=s.ignore_eos,
            min_tokens=s.min_tokens,
            logprobs=s.top_logprobs if s.logprobs else None,
        )
        try:
            params.validate()
        except ValueError as exc:
            raise invalid_request(str(exc)) from exc
        return params


async def _engine_errors(stream: AsyncIterator[Any], backend: str, kind: str) -> AsyncGenerator[Any, None]:
    """The engine's outputs, with its exceptions turned into gateway errors."""
    from engine.llm_engine import ContextLengthError

    try:
        async for out in stream:
            if out.finished and out.finish_reason == "abort":
                raise upstream_failed(backend, "the engine aborted the request (shutting down?)", status=503)
            yield out
    except ContextLengthError as exc:
        raise context_length_exceeded(str(exc), kind) from exc
    except ValueError as exc:
        raise invalid_request(str(exc)) from exc
    except GatewayError:
        raise
    except Exception as exc:
        raise upstream_failed(backend, "the engine failed", status=500, internal=repr(exc)) from exc


def _forces_tool_calls(request: GenerationRequest) -> bool:
    """Whether the grammar makes the answer tool calls (tool_choice "required" or a named function)."""
    return request.tool_choice == "required" or isinstance(request.tool_choice, dict)


def _default_served_name(model_path: str) -> str:
    if model_path.startswith(BUILTIN_PREFIX):
        return model_path[len(BUILTIN_PREFIX) :]
    return Path(model_path).expanduser().resolve().name
