"""engine/structured/mask_provider.py on the tiny model's tokenizer (no model run): the masks'
bits, the stop-only mask after a grammar error, the tracks n>1 choices share, and the step
batcher's hand-offs (inline by default, a worker with overlap on, an error carried to the
sampler)."""

from __future__ import annotations

import threading

import pytest
import torch

from engine.make_tiny import make_tiny
from engine.structured import grammar_tokenizer, mask_provider, plan_structured
from engine.structured.mask_provider import OVERLAP_ENV, GrammarMask, _StepBatcher, compute_masks
from engine.text.tokenizer import TextTokenizer

BOOLEAN = {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "boolean"}, "strict": True}}


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    return TextTokenizer(make_tiny(tmp_path_factory.mktemp("masks") / "tiny"))


@pytest.fixture(scope="module")
def lltok(tok):
    return grammar_tokenizer(tok, tok.vocab_size, set(tok.eos_token_ids))


@pytest.fixture
def batcher(monkeypatch) -> _StepBatcher:
    fresh = _StepBatcher(overlap=False)
    monkeypatch.setattr(mask_provider, "_batcher", fresh)
    return fresh


def _matcher(lltok):
    return plan_structured(lltok, response_format=BOOLEAN).matcher.deep_copy()  # plans are cached: never touch theirs


def _allowed(mask: torch.Tensor, tok) -> set[bytes]:
    return {tok.token_bytes(i) for i in torch.nonzero(mask).flatten().tolist()}


def _first_bytes(mask: torch.Tensor, tok) -> set[bytes]:
    return {b[:1] for b in _allowed(mask, tok)}


def _ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


# ---- compute_masks -----------------------------------------------------------------------


@pytest.mark.parametrize("extra", [0, 1, 31, 32, 33])
def test_masks_cover_exactly_the_vocabulary_whatever_its_size(tok, extra):
    vocab = tok.vocab_size + extra
    lltok = grammar_tokenizer(tok, vocab, set(tok.eos_token_ids))
    matcher = _matcher(lltok)
    masks = compute_masks([matcher, matcher.deep_copy()], vocab)
    assert masks.shape == (2, vocab) and masks.dtype == torch.bool
    assert torch.equal(masks[0], masks[1])
    assert _first_bytes(masks[0], tok) <= {b"t", b"f", b" "} and masks[0].any()
    assert not masks[0, tok.vocab_size :].any()


def test_masks_through_the_executor_are_the_same(tok, lltok):
    import llguidance

    a, b = _matcher(lltok), _matcher(lltok)
    assert b.consume_tokens(_ids(tok, "tr"))
    alone = compute_masks([a, b], tok.vocab_size)
    together = compute_masks([a, b], tok.vocab_size, llguidance.LLExecutor())
    assert torch.equal(alone, together)
    assert not torch.equal(alone[0], alone[1])


# ---- GrammarMask -------------------------------------------------------------------------------


def test_a_mask_follows_the_output(tok, lltok, batcher):
    mask = GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids))
    assert _first_bytes(mask([]), tok) <= {b"t", b"f", b" "}
    after = _allowed(mask(_ids(tok, "tr")), tok)
    assert after and all(b"ue".startswith(b) for b in after)
    assert set(torch.nonzero(mask(_ids(tok, "true"))).flatten().tolist()) == set(tok.eos_token_ids)
    assert mask.errors == []


def test_a_grammar_error_is_recorded_and_leaves_only_the_stop_ids(tok, lltok, batcher):
    vocab = tok.vocab_size
    stops = {-1, 0, 5, vocab - 1, vocab, vocab + 7}
    mask = GrammarMask(_matcher(lltok), vocab, stops)
    got = mask(_ids(tok, "{"))
    assert set(torch.nonzero(got).flatten().tolist()) == {0, 5, vocab - 1}
    assert got.shape == (vocab,) and got.dtype == torch.bool
    assert len(mask.errors) == 1 and mask.errors[0]


def test_a_prefetched_row_in_error_gets_the_stop_ids_too(tok, lltok, batcher):
    mask = GrammarMask(_matcher(lltok), tok.vocab_size, {3})
    bad = _ids(tok, "{")
    mask.prefetch(bad)
    assert torch.nonzero(mask(bad)).flatten().tolist() == [3]
    assert len(mask.errors) == 1


def test_choices_share_the_track_of_their_common_output(tok, lltok, batcher):
    mask = GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids))
    t, r = _ids(tok, "t"), _ids(tok, "tr")
    mask(t)
    mask(t)
    assert len(mask._tracks) == 1
    mask(r)
    assert len(mask._tracks) == 1 and mask._tracks[0].consumed == r
    mask(_ids(tok, "f"))
    assert len(mask._tracks) == 2
    after = _allowed(mask(r + _ids(tok, "u")), tok)
    assert after and all(b"e".startswith(b) for b in after)
    assert mask.errors == []


def test_the_longest_matching_track_is_advanced(tok, lltok, batcher):
    mask = GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids))
    [f], [a] = _ids(tok, "f"), _ids(tok, "a")
    mask([])
    mask([f])  # the empty track advanced to [f]
    mask([])  # a fresh track for []
    assert sorted(len(t.consumed) for t in mask._tracks) == [0, 1]
    mask([f, a])
    assert sorted(t.consumed for t in mask._tracks) == [[], [f, a]]
    assert mask.errors == []


def test_prefetched_masks_are_computed_once_for_the_step(tok, lltok, batcher):
    mask = GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids))
    start = mask.prefetch([])
    assert start == batcher.start
    pending = mask._tracks[0].pending
    assert pending is not None and not pending.done()
    assert mask.prefetch([]) == batcher.start and mask._tracks[0].pending is pending
    start()  # overlap off: nothing runs before the sampler asks
    assert not pending.done()
    first = mask([])
    assert pending.done() and torch.equal(first, compute_masks([_matcher(lltok)], tok.vocab_size)[0])
    assert mask([]) is first


def test_a_prefetched_mask_is_dropped_when_its_row_moves_on(tok, lltok, batcher):
    mask = GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids))
    mask.prefetch([])
    r = _ids(tok, "tr")
    after = _allowed(mask(r), tok)
    assert mask._tracks[0].pending is None
    assert after and all(b"ue".startswith(b) for b in after)


def test_with_overlap_a_worker_computes_the_step(tok, lltok, monkeypatch):
    batcher = _StepBatcher(overlap=True)
    monkeypatch.setattr(mask_provider, "_batcher", batcher)
    masks = [GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids)) for _ in range(2)]
    starts = {m.prefetch([]) for m in masks}
    assert starts == {batcher.start}
    batcher.start()
    batcher.start()  # once queued, a second start adds nothing
    pending = [m._tracks[0].pending for m in masks]
    assert [p.result(timeout=10).shape for p in pending] == [(tok.vocab_size,)] * 2
    assert torch.equal(masks[0]([]), masks[1]([]))
    batcher.start()  # nothing recorded: no job
    assert batcher._queued is False


def test_an_error_while_computing_reaches_every_row(tok, lltok, batcher, monkeypatch):
    masks = [GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids)) for _ in range(2)]
    for m in masks:
        m.prefetch([])

    def broken(*args, **kwargs):
        raise RuntimeError("grammar engine down")

    monkeypatch.setattr(mask_provider, "compute_masks", broken)
    for m in masks:
        with pytest.raises(RuntimeError, match="grammar engine down"):
            m([])


def test_rows_of_two_vocabularies_are_computed_apart(tok, lltok, batcher):
    wide = tok.vocab_size + 40
    wide_lltok = grammar_tokenizer(tok, wide, set(tok.eos_token_ids))
    small = GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids))
    big = GrammarMask(_matcher(wide_lltok), wide, set(tok.eos_token_ids))
    small.prefetch([])
    big.prefetch([])
    batcher.run_now()
    a, b = small([]), big([])
    assert (a.shape, b.shape) == ((tok.vocab_size,), (wide,))
    assert torch.equal(a, b[: tok.vocab_size])


@pytest.mark.parametrize(("value", "overlap"), [(None, False), ("0", False), ("1", True), ("yes", False)])
def test_the_overlap_switch(monkeypatch, value, overlap):
    monkeypatch.setattr(mask_provider, "_batcher", None)
    if value is None:
        monkeypatch.delenv(OVERLAP_ENV, raising=False)
    else:
        monkeypatch.setenv(OVERLAP_ENV, value)
    first = mask_provider._step_batcher()
    assert first.overlap is overlap
    assert mask_provider._step_batcher() is first
    assert OVERLAP_ENV == "SWITCHYARD_GRAMMAR_OVERLAP"


def test_with_overlap_one_job_per_step_runs_on_the_grammar_mask_thread(tok, lltok, monkeypatch):
    batcher = _StepBatcher(overlap=True)
    monkeypatch.setattr(mask_provider, "_batcher", batcher)
    submitted, threads = [], []
    busy = threading.Event()
    batcher._worker.submit(busy.wait, 10)  # the worker is busy: the step's job waits in the queue
    submit = batcher._worker.submit
    monkeypatch.setattr(batcher._worker, "submit", lambda fn: submitted.append(fn) or submit(fn))
    real = mask_provider.compute_masks

    def recording(*args):
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(mask_provider, "compute_masks", recording)
    masks = [GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids)) for _ in range(3)]
    for m in masks:
        m.prefetch([])
    for _ in masks:
        batcher.start()  # every request's starter is called; the step's job is queued once
    busy.set()
    for m in masks:
        m._tracks[0].pending.result(timeout=10)
    assert len(submitted) == 1
    assert len(threads) == 1 and threads[0].startswith("grammar-mask")


def test_a_row_moving_on_waits_for_the_worker_still_computing_its_mask(tok, lltok, monkeypatch):
    batcher = _StepBatcher(overlap=True)
    monkeypatch.setattr(mask_provider, "_batcher", batcher)
    entered, release = threading.Event(), threading.Event()
    real = mask_provider.compute_masks

    def slow(*args):
        if threading.current_thread().name.startswith("grammar-mask"):
            entered.set()
            release.wait(10)
        return real(*args)

    monkeypatch.setattr(mask_provider, "compute_masks", slow)
    mask = GrammarMask(_matcher(lltok), tok.vocab_size, set(tok.eos_token_ids))
    mask.prefetch([])
    batcher.start()
    assert entered.wait(10)
    timer = threading.Timer(0.3, release.set)
    timer.start()
    after = mask(_ids(tok, "tr"))
    assert release.is_set()  # it waited for the worker before touching the matcher
    timer.join()
    assert after.any() and mask.errors == []
