"""`GrammarMask`: a request's `allowed_tokens_fn`, with masks computed ahead of need.

Before each forward pass the engine calls `prefetch(output_ids)` for every grammar row
of the step. That only records the row. The step's masks are then computed together:
every recorded row's grammar state advanced by its newest token, all masks in one
llguidance call (parallel in Rust, without the GIL). By default that happens when the
sampler asks for the first of them, after the forward pass was launched (on a GPU it
overlaps the model; on a CPU nothing can). With SWITCHYARD_GRAMMAR_OVERLAP=1 a
background worker does it during the forward pass, started by the starter `prefetch`
returns (the engine calls it once per step); that wins only where a core is idle. The
sampler's call `mask(output_ids)` collects the row's result. A row that was not
prefetched (a freshly forked n>1 choice) computes its mask on the spot.

One worker job per step, not per row: a hand-off between threads costs about as much
as computing a small mask, so per-row jobs made the GIL ping-pong the main cost.

One request's params (and so one GrammarMask) are shared by its n choices, which
diverge after their first token. So the mask keeps one grammar state per line of
output ("track"): a call advances the track whose consumed tokens are a prefix of the
given output, or starts a new one from a copy of the compiled start state.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import llguidance
import numpy as np
import torch


class _Track:
    __slots__ = ("matcher", "consumed", "to_consume", "pending")

    def __init__(self, matcher: llguidance.LLMatcher) -> None:
        self.matcher = matcher
        self.consumed: list[int] = []  # the output this track stands for
        self.to_consume: list[int] = []  # tail of `consumed` the matcher has not seen yet
        self.pending: Future[torch.Tensor] | None = None  # the mask after `consumed`, being computed


class _StepBatcher:
    """Collects a step's prefetched rows and computes all their masks in one go."""

    def __init__(self, overlap: bool) -> None:
        self.overlap = overlap
        self._lock = threading.Lock()
        self._rows: list[tuple[_Track, GrammarMask, Future]] = []
        self._queued = False
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-mask")
        self._executor = llguidance.LLExecutor()

    def add(self, track: _Track, owner: GrammarMask) -> Future:
        future: Future = Future()
        with self._lock:
            self._rows.append((track, owner, future))
        return future

    def start(self) -> None:
        """Called by the engine once per step, before the forward pass: with `overlap` on, the
        worker computes the recorded rows' masks while the model runs. Off, nothing happens
        yet: the first mask the sampler asks for computes them all (`run_now`), which on a GPU
        still overlaps the forward pass, whose kernels run asynchronously until sampling."""
        if not self.overlap:
            return
        with self._lock:
            if not self._rows or self._queued:
                return
            self._queued = True
        self._worker.submit(self._drain)

    def run_now(self) -> None:
        """Compute, in this thread, the masks of rows no worker has taken yet."""
        self._drain()

    def _drain(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
            self._queued = False
        if not rows:
            return
        try:
            for track, owner, _ in rows:
                owner._catch_up(track)
            by_vocab: dict[int, list[tuple[_Track, GrammarMask, Future]]] = {}
            for row in rows:  # engines of different models may share this process
                by_vocab.setdefault(row[1].vocab_size, []).append(row)
            for vocab_size, group in by_vocab.items():
                masks = compute_masks([track.matcher for track, _, _ in group], vocab_size, self._executor)
                for (track, owner, future), mask in zip(group, masks):
                    future.set_result(owner._stop_only if track.matcher.is_error() else mask)
        except BaseException as exc:  # the sampler re-raises it in the engine thread
            for _, _, future in rows:
                if not future.done():
                    future.set_exception(exc)


def compute_masks(
    matchers: list[llguidance.LLMatcher], vocab_size: int, executor: llguidance.LLExecutor | None = None
) -> torch.Tensor:
    """Bool masks [len(matchers), vocab_size] (True = allowed), computed in one call."""
    words = (vocab_size + 31) // 32
    bits = np.zeros((len(matchers), words), dtype=np.int32)
    if executor is not None:
        executor.unsafe_compute_mask_ptr(
            [(m, i) for i, m in enumerate(matchers)], bits.ctypes.data, words * 4, len(matchers)
        )
    else:
        for i, m in enumerate(matchers):
            m.unsafe_compute_mask_ptr(bits[i].ctypes.data, words * 4)
    allowed = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")[:, :vocab_size]
    return torch.from_numpy(allowed.view(np.bool_))


# Whether masks are computed in a background thread while the model runs. It pays only
# where a core is free for it (and the forward leaves the GIL alone long enough);
# docs/structured-output.md has the measurements behind the default (off).
OVERLAP_ENV = "SWITCHYARD_GRAMMAR_OVERLAP"
_batcher: _StepBatcher | None = None
_batcher_lock = threading.Lock()


def _step_batcher() -> _StepBatcher:
    global _batcher
    with _batcher_lock:
        if _batcher is None:
            _batcher = _StepBatcher(os.environ.get(OVERLAP_ENV, "0") == "1")
        return _batcher


class GrammarMask:
    """allowed_tokens_fn for one request: output ids so far -> bool mask (True = allowed)."""

    def __init__(self, start: llguidance.LLMatcher, vocab_size: int, stop_token_ids: set[int]) -> None:
        self._start = start
        self.vocab_size = vocab_size
        self._stop_only = torch.zeros(vocab_size, dtype=torch.bool)
        self._stop_only[[t for t in stop_token_ids if 0 <= t < vocab_size]] = True
        self._tracks: list[_Track] = []
        self.errors: list[str] = []  # grammar errors met (a bug if ever non-empty)

    def prefetch(self, output_ids: list[int]) -> Callable[[], None]:
        """Record that the mask after `output_ids` is wanted this step; the returned starter
        (one for all requests) sends the step's rows to the worker."""
        batcher = _step_batcher()
        track = self._track_for(output_ids)
        if track.pending is None:
            track.pending = batcher.add(track, self)
        return batcher.start

    def __call__(self, output_ids: list[int]) -> torch.Tensor:
        track = self._track_for(output_ids)
        if track.pending is not None:
            if not track.pending.done():
                _step_batcher().run_now()
            return track.pending.result()
        self._catch_up(track)
        if track.matcher.is_error():
            return self._stop_only
        return compute_masks([track.matcher], self.vocab_size)[0]

    # ---- internals ----------------------------------------------------------------

    def _track_for(self, output_ids: list[int]) -> _Track:
        """The track standing for exactly `output_ids` (engine thread only)."""
        best: _Track | None = None
        for track in self._tracks:
            n = len(track.consumed)
            if n <= len(output_ids) and (best is None or n > len(best.consumed)) and output_ids[:n] == track.consumed:
                best = track
        if best is None:
            best = _Track(self._start.deep_copy())
            self._tracks.append(best)
        if len(output_ids) > len(best.consumed):
            if best.pending is not None:
                if not best.pending.done():  # the worker may still be using this matcher
                    _step_batcher().run_now()
                    best.pending.result()
                best.pending = None
            best.to_consume += output_ids[len(best.consumed) :]
            best.consumed = list(output_ids)
        return best

    def _catch_up(self, track: _Track) -> None:
        """Feed the matcher the tokens it has not seen (worker or engine thread, never both)."""
        if track.to_consume:
            new, track.to_consume = track.to_consume, []
            if not track.matcher.consume_tokens(new):
                self.errors.append(track.matcher.get_error())
