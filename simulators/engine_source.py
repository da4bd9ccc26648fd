"""The `engine` token source: real generation on a local model through Switchyard's
native engine (`engine.async_engine.AsyncEngine` over `engine.llm_engine.LLMEngine`).

The model is loaded before the simulator binds its port, so a loading simulator
refuses connections exactly as the runtime does. Prompts are tokenized with the
model's tokenizer (chat through its chat template, or a plain rendering when the
model has none), so usage, context checks and cached tokens count real tokens.

A request without `max_tokens` is capped at `--output-tokens`: a tiny random model
rarely emits EOS, and generating to the end of the context would only be slow.
Tool calls keep the synthetic path (a random model does not write valid calls).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

from engine.async_engine import AsyncEngine
from engine.builtin import resolve_model_path
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.stop import StopStringMatcher
from engine.text.tokenizer import TextTokenizer
from simulators.options import SimOptions
from simulators.request import SimRequest, render_chat_plain
from simulators.tokens import Generation, Token

_ENGINE_FINISH = {"length": "length", "abort": "abort"}


class EngineGeneration(Generation):
    def __init__(self, source: EngineSource, request: SimRequest, engine_id: str) -> None:
        self.source = source
        self.request = request
        self.engine_id = engine_id
        self.prompt_tokens = request.prompt_tokens

    def abort(self) -> None:
        self.source.engine.abort(self.engine_id)

    def _params(self) -> SamplingParams:
        request = self.request
        room = max(1, self.source.max_model_len - len(request.prompt_words))
        max_tokens = request.max_tokens if request.max_tokens is not None else self.source.opts.output_tokens
        temperature = request.temperature if isinstance(request.temperature, (int, float)) else 1.0
        return SamplingParams(
            max_tokens=max(1, min(max_tokens, room)),
            temperature=float(temperature),
            seed=request.seed,
            n=max(1, request.n),
            ignore_eos=request.ignore_eos,
        )

    async def __aiter__(self) -> AsyncIterator[Token]:  # type: ignore[override]
        tokenizer = self.source.tokenizer
        eos = set(tokenizer.eos_token_ids)
        n = max(1, self.request.n)
        detoks = [IncrementalDetokenizer(tokenizer) for _ in range(n)]
        stops = [StopStringMatcher(self.request.stop) for _ in range(n)]
        done = [False] * n
        prompt_ids = [int(w) for w in self.request.prompt_words]
        async for out in self.source.engine.generate(self.engine_id, prompt_ids, self._params()):
            i = out.index
            if done[i]:
                continue
            piece = detoks[i].add(out.token_ids)
            last_id = out.token_ids[-1] if out.token_ids else 0
            released = stops[i].feed(piece)
            text = released.text
            if released.stopped:
                done[i] = True
                if all(done):  # every choice hit a stop string: nothing left to generate
                    self.source.engine.abort(self.engine_id)
                yield Token(i, text, last_id, finish="stop_sequence", matched=stops[i].matched)
                continue
            if not out.finished:
                yield Token(i, text, last_id)
                continue
            done[i] = True
            text += stops[i].flush() + detoks[i].flush()
            if out.finish_reason == "stop":
                finish, matched_id = "eos", (last_id if last_id in eos else None)
                yield Token(i, text, last_id, finish=finish, matched=matched_id)
            else:
                yield Token(i, text, last_id, finish=_ENGINE_FINISH.get(out.finish_reason or "", "length"))


class EngineSource:
    name = "engine"

    def __init__(self, opts: SimOptions) -> None:
        self.opts = opts
        self.model_spec = opts.model_dir or "builtin:tiny"
        self.engine: AsyncEngine = None  # type: ignore[assignment]  # set by load()
        self.tokenizer: TextTokenizer = None  # type: ignore[assignment]
        self.max_model_len = opts.max_model_len
        self._ids = itertools.count()

    async def load(self) -> None:
        model_dir = resolve_model_path(self.model_spec)
        self.tokenizer = TextTokenizer(model_dir)
        llm = LLMEngine(str(model_dir), max_model_len=self.opts.max_model_len, seed=self.opts.seed)
        self.max_model_len = llm.max_model_len
        self.engine = AsyncEngine(llm)

    def tokenize(self, request: SimRequest, tools: Any = None) -> None:
        """Replace the synthetic word count with the model's real prompt tokens."""
        if request.messages is not None:
            try:
                text = self.tokenizer.apply_chat_template(request.messages, tools=tools)
            except ValueError:
                text = render_chat_plain(request.messages)
        else:
            text = request.prompt_text
        ids = self.tokenizer.encode(text) or [0]
        request.prompt_text = text
        request.prompt_words = [str(i) for i in ids]
        request.prompt_ids = ids  # what the prefix cache hashes

    def generate(self, request: SimRequest) -> Generation:
        return EngineGeneration(self, request, f"{request.request_id}#{next(self._ids)}")
