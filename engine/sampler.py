"""Turns a batch of logits rows into next tokens, one row per sequence.

Order of processing per row: penalties (repetition, frequency, presence), logit_bias,
the grammar mask (`allowed_tokens_fn`), the min_tokens mask on EOS/stop ids, then
temperature; greedy rows take the argmax, others are truncated by top-k, top-p and
min-p and sampled by the exponential race (argmax of p / Exp(1) noise is an exact draw
from p). Seeded rows draw their noise from their own torch.Generator, so a seeded request
reproduces whatever else shares its batch.

Reported logprobs are the log-softmax of the *processed* logits: after penalties, bias,
masks and temperature, before top-k/top-p/min-p truncation (so alternatives outside the
nucleus still get finite values)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.sequence import Sequence

LogprobEntry = tuple[float, list[tuple[int, float]]]


@dataclass
class SampleResult:
    token_ids: list[int]
    logprobs: list[LogprobEntry | None] | None  # None when no row asked for logprobs


class Sampler:
    def __init__(self, vocab_size: int, eos_token_ids: set[int], device: torch.device, seed: int = 0) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SampleResult:
        params = [s.params for s in seqs]
        for i, (seq, p) in enumerate(zip(seqs, params)):
            if (
                p.needs_penalties
                or p.logit_bias
                or p.allowed_tokens_fn is not None
                or (p.min_tokens and seq.num_output_tokens < p.min_tokens)
            ):
                self._process_row(logits[i], seq)
        want_logprobs = any(p.logprobs is not None for p in params)
        all_greedy = all(p.temperature == 0.0 for p in params)
        if all_greedy:
            tokens = logits.argmax(dim=-1)
            logprobs = self._logprobs(logits, tokens, params) if want_logprobs else None
            return SampleResult(tokens.tolist(), logprobs)

        temps = logits.new_tensor([p.temperature if p.temperature > 0 else 1.0 for p in params])
        scaled = logits / temps[:, None]
        logprobs_src = scaled
        truncated = self._truncate(scaled, params)
        probs = truncated.softmax(dim=-1)
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for i, seq in enumerate(seqs):
            if seq.generator is not None:
                noise[i].exponential_(generator=seq.generator)
        tokens = (probs / noise).argmax(dim=-1)
        greedy_rows = [i for i, p in enumerate(params) if p.temperature == 0.0]
        if greedy_rows:
            tokens[greedy_rows] = logits[greedy_rows].argmax(dim=-1)
        logprobs = self._logprobs(logprobs_src, tokens, params) if want_logprobs else None
        return SampleResult(tokens.tolist(), logprobs)

    def _process_row(self, row: torch.Tensor, seq: Sequence) -> None:
        p = seq.params
        output = seq.output_token_ids
        if p.needs_penalties:
            if p.repetition_penalty != 1.0:
                seen = sorted(set(seq.token_ids))
                vals = row[seen]
                row[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
            if output and (p.frequency_penalty or p.presence_penalty):
                counts = torch.bincount(row.new_tensor(output, dtype=torch.long), minlength=self.vocab_size)
                counts = counts[: self.vocab_size].to(row.dtype)
                row -= counts * p.frequency_penalty + (counts > 0).to(row.dtype) * p.presence_penalty
        if p.logit_bias:
            row[list(p.logit_bias.keys())] += row.new_tensor(list(p.logit_bias.values()))
        if p.allowed_tokens_fn is not None:
            allowed = p.allowed_tokens_fn(output)
            if allowed is not None:
                row.masked_fill_(~allowed.to(device=row.device, dtype=torch.bool)[: self.vocab_size], -math.inf)
        if p.min_tokens and seq.num_output_tokens < p.min_tokens:
            banned = set(p.stop_token_ids)
            if not p.ignore_eos:
                banned |= self.eos_token_ids
            banned = [t for t in banned if 0 <= t < self.vocab_size]
            if banned:
                row[banned] = -math.inf

    @staticmethod
    def _truncate(scaled: torch.Tensor, params) -> torch.Tensor:
        use_top_k = any(p.top_k > 0 for p in params)
        use_top_p = any(p.top_p < 1.0 for p in params)
        use_min_p = any(p.min_p > 0.0 for p in params)
        if not (use_top_k or use_top_p or use_min_p):
            return scaled
        vocab = scaled.shape[-1]
        out = scaled.clone()
        if use_top_k or use_top_p:
            sorted_vals, sorted_idx = out.sort(dim=-1, descending=True)
            keep = torch.ones_like(sorted_vals, dtype=torch.bool)
            if use_top_k:
                ks = sorted_idx.new_tensor([p.top_k if 0 < p.top_k < vocab else vocab for p in params])
                keep &= torch.arange(vocab, device=out.device)[None, :] < ks[:, None]
            if use_top_p:
                top_ps = out.new_tensor([p.top_p for p in params])
                probs = sorted_vals.masked_fill(~keep, -math.inf).softmax(dim=-1)
                before = probs.cumsum(dim=-1) - probs  # mass of strictly more likely tokens
                keep &= before < top_ps[:, None]
            keep[:, 0] = True
            out.scatter_(1, sorted_idx, sorted_vals.masked_fill(~keep, -math.inf))
        if use_min_p:
            min_ps = out.new_tensor([p.min_p for p in params])
            probs = out.softmax(dim=-1)
            threshold = probs.max(dim=-1, keepdim=True).values * min_ps[:, None]
            out = out.masked_fill(probs < threshold, -math.inf)
        return out

    @staticmethod
    def _logprobs(source: torch.Tensor, tokens: torch.Tensor, params) -> list[LogprobEntry | None]:
        logp = torch.log_softmax(source.float(), dim=-1)
        chosen = logp.gather(1, tokens[:, None]).squeeze(1).tolist()
        k_max = max((p.logprobs or 0) for p in params)
        if k_max:
            top_vals, top_ids = logp.topk(min(k_max, logp.shape[-1]), dim=-1)
            top_vals, top_ids = top_vals.tolist(), top_ids.tolist()
        result: list[LogprobEntry | None] = []
        for i, p in enumerate(params):
            if p.logprobs is None:
                result.append(None)
                continue
            k = p.logprobs
            alternatives = list(zip(top_ids[i][:k], top_vals[i][:k])) if k else []
            result.append((chosen[i], alternatives))
        return result
