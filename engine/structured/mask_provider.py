"""`GrammarMask`: a request's `allowed_tokens_fn`, with masks computed ahead of need.

The engine calls `prefetch(output_ids)` for every grammar row of a step *before* the
forward pass; the mask is then computed by llguidance in a background thread (it drops
the GIL) while the model runs, and the sampler's call `mask(output_ids)` just collects
it. A row that was not prefetched (a freshly forked n>1 choice) computes its mask on
the spot.

One request's params (and so one GrammarMask) are shared by its n choices, which
diverge after their first token. So the mask keeps one grammar matcher per line of
output ("track"): a call advances the track whose consumed tokens are a prefix of the
given output, or starts a new one from a copy of the compiled start state.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import llguidance
import numpy as np
import torch

# One worker for all requests: masks for a batch are computed back to back while the
# forward pass (which has the CPU cores) runs; a second worker would only compete.
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _mask_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-mask")
        return _executor


class _Track:
    __slots__ = ("matcher", "consumed", "pending")

    def __init__(self, matcher: llguidance.LLMatcher) -> None:
        self.matcher = matcher
        self.consumed: list[int] = []
        self.pending: Future[torch.Tensor] | None = None   # mask for the state after `consumed`


class GrammarMask:
    """allowed_tokens_fn for one request: output ids so far -> bool mask (True = allowed)."""

    def __init__(self, start: llguidance.LLMatcher, vocab_size: int, stop_token_ids: set[int]) -> None:
        self._start = start
        self.vocab_size = vocab_size
        self._stop_only = torch.zeros(vocab_size, dtype=torch.bool)
        self._stop_only[[t for t in stop_token_ids if 0 <= t < vocab_size]] = True
        self._tracks: list[_Track] = []
        self.errors: list[str] = []          # grammar errors met (a bug if ever non-empty)

    def prefetch(self, output_ids: list[int]) -> None:
        """Start computing the mask that follows `output_ids` (called before the forward pass)."""
        track = self._advance(output_ids)
        if track.pending is None:
            track.pending = _mask_executor().submit(self._compute, track.matcher)

    def __call__(self, output_ids: list[int]) -> torch.Tensor:
        track = self._advance(output_ids)
        if track.pending is None:
            return self._compute(track.matcher)
        return track.pending.result()

    # ---- internals ----------------------------------------------------------------

    def _advance(self, output_ids: list[int]) -> _Track:
        """The track positioned exactly after `output_ids` (its pending mask kept if any)."""
        best: _Track | None = None
        for track in self._tracks:
            n = len(track.consumed)
            if n <= len(output_ids) and output_ids[:n] == track.consumed and (best is None or n > len(best.consumed)):
                best = track
        if best is None:
            best = _Track(self._start.deep_copy())
            self._tracks.append(best)
        new = output_ids[len(best.consumed):]
        if new:
            if best.pending is not None:
                best.pending.result()          # the worker may still be reading this matcher
                best.pending = None
            if not best.matcher.consume_tokens(new):
                self.errors.append(best.matcher.get_error())
            best.consumed = list(output_ids)
        return best

    def _compute(self, matcher: llguidance.LLMatcher) -> torch.Tensor:
        if matcher.is_error():
            # Only a stop token is left to offer: ending the choice beats sampling from
            # an all -inf row. Unreachable while the sampler honours our masks.
            return self._stop_only
        bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, bitorder="little")[: self.vocab_size].view(np.bool_)
        return torch.from_numpy(allowed)
