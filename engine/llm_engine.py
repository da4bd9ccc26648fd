"""The synchronous engine: add requests, call step(), read TokenOutputs."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine.block_pool import BlockPool
from engine.config import EngineConfig, ModelConfig
from engine.kv_cache_manager import KVCacheManager
from engine.model_runner import ModelRunner
from engine.pooling import batches, check_inputs, pool
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledChunk, Scheduler
from engine.sequence import Sequence


class ContextLengthError(ValueError):
    """prompt + max_tokens does not fit the model's context (maps to a 400)."""


@dataclass
class TokenOutput:  # one choice's progress in one step
    request_id: str
    index: int  # choice index 0..n-1
    token_ids: list[int]  # new tokens this step (a final EOS/stop id is included)
    logprobs: list[tuple[float, list[tuple[int, float]]]] | None
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" | None
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens served from the prefix cache


@dataclass
class EngineStats:
    running: int
    waiting: int
    kv_usage: float
    prefix_hit_rate: float
    preemptions_total: int
    num_free_blocks: int
    num_blocks: int
    last_step_s: float
    last_batch_tokens: int
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0


@dataclass
class _SamplingRows:
    """Who samples this step: `targets[i]` samples from logits row `rows[i]` (forked
    choices share their parent's row)."""

    targets: list[Sequence]
    rows: list[int]


class _Request:
    __slots__ = ("params", "seqs", "forked", "num_unfinished")

    def __init__(self, params: SamplingParams, first: Sequence) -> None:
        self.params = params
        self.seqs: list[Sequence] = [first]
        self.forked = params.n == 1
        self.num_unfinished = params.n


class LLMEngine:
    def __init__(
        self,
        model_dir: str,
        *,
        dtype: str = "float32",
        device: str = "cpu",
        block_size: int = 16,
        kv_cache_bytes: int | None = None,
        num_blocks: int | None = None,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 2048,
        max_model_len: int | None = None,
        enable_prefix_caching: bool = True,
        seed: int = 0,
        matryoshka: bool | list[int] | None = None,
    ) -> None:
        self.config = EngineConfig(
            model_dir=model_dir,
            dtype=dtype,
            device=device,
            block_size=block_size,
            kv_cache_bytes=kv_cache_bytes,
            num_blocks=num_blocks,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len,
            enable_prefix_caching=enable_prefix_caching,
            seed=seed,
        )
        self.config.validate()
        self.model_config = ModelConfig.from_dir(model_dir)
        if matryoshka is not None:  # the operator's word over config.json (vLLM's --hf-overrides)
            self.model_config.with_matryoshka(matryoshka)
        self.eos_token_ids: set[int] = set(self.model_config.eos_token_ids)
        self.max_model_len = min(
            max_model_len or self.model_config.max_position_embeddings,
            self.model_config.max_position_embeddings,
            self.model_config.sliding_window or self.model_config.max_position_embeddings,
        )
        self.device = torch.device(device)
        self.runner = ModelRunner(self.model_config, self.config, self.max_model_len)
        self.pool = BlockPool(self.runner.num_blocks)
        self.kv = KVCacheManager(self.pool, block_size, enable_prefix_caching)
        self.scheduler = Scheduler(self.kv, max_num_seqs, max_num_batched_tokens)
        self.sampler = Sampler(self.model_config.vocab_size, self.eos_token_ids, self.device, seed)
        self.requests: dict[str, _Request] = {}
        self._last_step_s = 0.0
        self._last_batch_tokens = 0

    # ---- requests ------------------------------------------------------------------

    def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, priority: int = 0
    ) -> None:
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already running")
        params.validate()
        if not prompt_token_ids:
            raise ValueError("the prompt must contain at least one token")
        vocab = self.model_config.vocab_size
        if min(prompt_token_ids) < 0 or max(prompt_token_ids) >= vocab:
            raise ValueError(f"prompt token ids must be in [0, {vocab})")
        if params.logit_bias and any(not 0 <= t < vocab for t in params.logit_bias):
            raise ValueError(f"logit_bias token ids must be in [0, {vocab})")
        total = len(prompt_token_ids) + params.max_tokens
        if total > self.max_model_len:
            raise ContextLengthError(
                f"this model's maximum context length is {self.max_model_len} tokens, but the request needs "
                f"{total} ({len(prompt_token_ids)} prompt + {params.max_tokens} max_tokens)"
            )
        if -(-total // self.config.block_size) > self.pool.num_blocks:
            raise ContextLengthError(
                f"the request needs {total} tokens of KV cache but the engine holds only "
                f"{self.pool.num_blocks * self.config.block_size}"
            )
        seq = Sequence(request_id, 0, prompt_token_ids, params, priority, self._generator(params, 0))
        self.requests[request_id] = _Request(params, seq)
        self.scheduler.add(seq)

    def _generator(self, params: SamplingParams, index: int) -> torch.Generator | None:
        if params.seed is None:
            return None
        g = torch.Generator(device=self.device)
        g.manual_seed(params.seed + index)
        return g

    def abort_request(self, request_id: str) -> None:
        req = self.requests.pop(request_id, None)
        if req is None:
            return
        for seq in req.seqs:
            if not seq.is_finished:
                self.scheduler.remove(seq)
                seq.finish_reason = "abort"

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    # ---- the step ------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[TokenOutput]:
        t0 = time.perf_counter()
        sched = self.scheduler.schedule()
        self._last_batch_tokens = sched.num_batched_tokens
        if not sched.scheduled:
            self._last_step_s = time.perf_counter() - t0
            return []
        self._prefetch_grammar_masks(sched.scheduled)
        forward = self.runner.execute(sched.scheduled)
        kv = self.kv
        for chunk in sched.scheduled:
            chunk.seq.num_computed_tokens += chunk.num_tokens
            kv.cache_full_blocks(chunk.seq)
        outputs: list[TokenOutput] = []
        sampled, logits = forward.sampled, forward.logits
        if sampled:
            expanded = self._expand_forks(sampled)
            if len(expanded.rows) != len(sampled):  # choices forked now share their parent's row
                logits = logits.index_select(0, torch.tensor(expanded.rows, device=logits.device))
            result = self.sampler(logits, expanded.targets)
            lps = result.logprobs
            for i, (seq, token) in enumerate(zip(expanded.targets, result.token_ids)):
                if not seq.is_finished:
                    outputs.append(self._append_token(seq, token, lps[i] if lps is not None else None))
        self._last_step_s = time.perf_counter() - t0
        return outputs

    @staticmethod
    def _prefetch_grammar_masks(scheduled: list[ScheduledChunk]) -> None:
        """Let a grammar hook start on this step's masks before the forward pass, so they are
        computed while the model runs (engine/structured); the sampler then collects them.
        A prefetch may return a starter, called once per step after every row was recorded,
        so the whole batch's masks can be computed in one go."""
        starters = set()
        for chunk in scheduled:
            seq = chunk.seq
            prefetch = getattr(seq.params.allowed_tokens_fn, "prefetch", None)
            if prefetch is not None and seq.num_computed_tokens + chunk.num_tokens == seq.num_tokens:
                starter = prefetch(seq.output_token_ids)
                if starter is not None:
                    starters.add(starter)
        for starter in starters:
            starter()

    def _expand_forks(self, sampled: list[Sequence]) -> _SamplingRows:
        """A request with n > 1 runs its prompt once; when that prefill completes, the
        other choices are forked off it (sharing its blocks) and each samples its own
        first token from the same logits row."""
        if all(self.requests[s.request_id].forked for s in sampled if s.request_id in self.requests):
            return _SamplingRows(sampled, list(range(len(sampled))))
        rows: list[int] = []
        targets: list[Sequence] = []
        for i, seq in enumerate(sampled):
            rows.append(i)
            targets.append(seq)
            req = self.requests.get(seq.request_id)
            if req is None or req.forked:
                continue
            req.forked = True
            for index in range(1, req.params.n):
                child = Sequence(
                    seq.request_id, index, seq.token_ids, req.params, seq.priority, self._generator(req.params, index)
                )
                child.arrival = seq.arrival
                child.admitted = True
                child.num_cached_tokens = seq.num_cached_tokens
                fork = self.kv.fork(seq, child)
                if fork.forked:
                    for copy in fork.copies:
                        self.runner.copy_block(copy.src, copy.dst)
                    self.scheduler.add_running(child)
                else:
                    self.scheduler.add(child)  # no block to copy into: recompute it later
                req.seqs.append(child)
                rows.append(i)
                targets.append(child)
        return _SamplingRows(targets, rows)

    def _append_token(self, seq: Sequence, token: int, logprob) -> TokenOutput:
        """Append a sampled token to an unfinished sequence; finish it on a stop or length."""
        seq.token_ids.append(token)
        p = seq.params
        reason = None
        if (
            token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids)
        ) and seq.num_output_tokens > p.min_tokens - 1:
            reason = "stop"
        elif seq.num_output_tokens >= p.max_tokens or seq.num_tokens >= self.max_model_len:
            reason = "length"
        if reason is not None:
            seq.finish_reason = reason
            self.scheduler.remove(seq)
            req = self.requests.get(seq.request_id)
            if req is not None:
                req.num_unfinished -= 1
                if req.num_unfinished == 0:
                    del self.requests[seq.request_id]
        return TokenOutput(
            seq.request_id,
            seq.index,
            [token],
            None if logprob is None else [logprob],
            reason is not None,
            reason,
            seq.num_prompt_tokens,
            seq.num_cached_tokens,
        )

    # ---- embeddings (engine/pooling.py) --------------------------------------------

    def check_embedding_inputs(self, prompts: list[list[int]], dimensions: int | None = None) -> None:
        """Raise PoolingInputError for inputs `embed_batch` could not honour."""
        check_inputs(self.model_config, self.max_model_len, prompts, dimensions)

    def embedding_batches(self, prompts: list[list[int]]) -> list[list[list[int]]]:
        """`prompts` in forward passes of at most the step's token budget each."""
        return batches(prompts, self.config.max_num_batched_tokens)

    @torch.inference_mode()
    def embed_batch(self, prompts: list[list[int]], dimensions: int | None = None) -> list[list[float]]:
        """One forward pass of checked prompts -> their embeddings (vLLM's pooling of a
        decoder model: last token, Matryoshka cut, L2 norm). Needs no free KV block."""
        return pool(self.runner.last_token_states(prompts), dimensions)

    def embed(self, prompts: list[list[int]], dimensions: int | None = None) -> list[list[float]]:
        self.check_embedding_inputs(prompts, dimensions)
        return [vec for batch in self.embedding_batches(prompts) for vec in self.embed_batch(batch, dimensions)]

    # ---- introspection -------------------------------------------------------------

    def stats(self) -> EngineStats:
        s = self.scheduler
        q = s.prefix_query_tokens
        return EngineStats(
            running=len(s.running),
            waiting=len(s.waiting),
            kv_usage=self.kv.usage,
            prefix_hit_rate=(s.prefix_hit_tokens / q) if q else 0.0,
            preemptions_total=s.num_preemptions,
            num_free_blocks=self.pool.num_free_blocks,
            num_blocks=self.pool.num_blocks,
            last_step_s=self._last_step_s,
            last_batch_tokens=self._last_batch_tokens,
            prefix_query_tokens=q,
            prefix_hit_tokens=s.prefix_hit_tokens,
        )

    def check_integrity(self) -> None:
        self.pool.check_integrity()
        held: dict[int, int] = {}
        for seq in self.scheduler.running:
            for block_id in seq.block_ids:
                held[block_id] = held.get(block_id, 0) + 1
        for seq in self.scheduler.waiting:
            assert not seq.blocks, f"waiting {seq} holds blocks"
        for block in self.pool.blocks:
            assert block.ref_count == held.get(block.block_id, 0), (
                f"block {block.block_id}: ref_count {block.ref_count} but held {held.get(block.block_id, 0)} times"
            )
