"""engine/sampler.py on hand-made logits, no model: each processing step's exact effect on
a row (penalties, bias, grammar mask, min_tokens), the truncations at, below and above
their boundaries, the draw's distribution and seeding, and the reported logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

V = 8
EOS = 7
CPU = torch.device("cpu")


def _seq(prompt=(1, 2), output=(), generator=None, **params) -> Sequence:
    seq = Sequence("r", 0, list(prompt), SamplingParams(**params), generator=generator)
    seq.token_ids.extend(output)
    return seq


def _sampler(seed: int = 0, vocab: int = V) -> Sampler:
    return Sampler(vocab, {EOS}, CPU, seed=seed)


def _row(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _logits_of(probs: list[float]) -> torch.Tensor:
    return torch.tensor([math.log(p) if p else -math.inf for p in probs], dtype=torch.float64)


def _process(row: torch.Tensor, seq: Sequence, vocab: int = V) -> list[float]:
    _sampler(vocab=vocab)._process_row(row, seq)
    return row.tolist()


# ---- the row's processing -------------------------------------------------------------


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits():
    row = _row(4.0, -4.0, 4.0, -4.0, 1.0, 1.0, 1.0, 1.0)
    out = _process(row, _seq(prompt=(0,), output=(1,), repetition_penalty=2.0))
    assert out == [2.0, -8.0, 4.0, -4.0, 1.0, 1.0, 1.0, 1.0]


def test_repetition_penalty_of_one_with_other_penalties_leaves_seen_logits():
    row = _row(4.0, -4.0, 0, 0, 0, 0, 0, 0)
    out = _process(row, _seq(prompt=(0, 1), output=(), presence_penalty=1.0))
    assert out[:2] == [4.0, -4.0]


def test_frequency_and_presence_penalties_count_output_tokens_only():
    row = torch.zeros(V, dtype=torch.float64)
    seq = _seq(prompt=(5, 5, 5), output=(1, 1, 2), frequency_penalty=0.5, presence_penalty=2.0)
    out = _process(row, seq)
    assert out == [0.0, -(2 * 0.5 + 2.0), -(0.5 + 2.0), 0.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(("frequency", "presence", "expected"), [(1.0, 0.0, -2.0), (0.0, 3.0, -3.0)])
def test_either_penalty_alone_applies(frequency, presence, expected):
    row = torch.zeros(V, dtype=torch.float64)
    out = _process(row, _seq(output=(4, 4), frequency_penalty=frequency, presence_penalty=presence))
    assert out[4] == expected
    assert out[3] == 0.0


def test_logit_bias_adds_to_its_tokens():
    row = torch.ones(V, dtype=torch.float64)
    out = _process(row, _seq(logit_bias={2: 5.0, 6: -1.5}))
    assert out == [1.0, 1.0, 6.0, 1.0, 1.0, 1.0, -0.5, 1.0]


def test_grammar_mask_gets_the_output_and_may_be_longer_than_the_vocabulary():
    seen = []

    def allowed(output):
        seen.append(list(output))
        mask = torch.zeros(V + 4, dtype=torch.bool)
        mask[[1, 3]] = True
        return mask

    row = torch.zeros(V, dtype=torch.float64)
    out = _process(row, _seq(prompt=(0,), output=(5, 6), allowed_tokens_fn=allowed))
    assert seen == [[5, 6]]
    assert [math.isfinite(v) for v in out] == [False, True, False, True, False, False, False, False]


def test_grammar_mask_none_leaves_the_row():
    row = torch.zeros(V, dtype=torch.float64)
    assert _process(row, _seq(allowed_tokens_fn=lambda output: None)) == [0.0] * V


def test_min_tokens_bans_eos_and_stop_ids_below_and_not_at_its_boundary():
    def banned(output, **params):
        row = torch.zeros(V, dtype=torch.float64)
        return [i for i, v in enumerate(_process(row, _seq(output=output, **params))) if v == -math.inf]

    params = dict(min_tokens=2, stop_token_ids=[3, -1, V, V + 5])
    assert banned((), **params) == [3, EOS]
    assert banned((0,), **params) == [3, EOS]
    assert banned((0, 0), **params) == []
    assert banned((0,), ignore_eos=True, **params) == [3]
    assert banned((0,), min_tokens=2, ignore_eos=True) == []


def test_a_row_needing_nothing_is_not_touched():
    logits = torch.tensor([[0.0, 5.0, 1.0, 0, 0, 0, 0, 0]])
    seq = _seq(temperature=0.0, min_tokens=1, output=(1,))
    assert _sampler()(logits, [seq]).token_ids == [1]


# ---- which rows get processed, end to end ---------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        dict(repetition_penalty=10.0, prompt=(1,)),
        dict(frequency_penalty=10.0, output=(1,)),
        dict(presence_penalty=10.0, output=(1,)),
        dict(logit_bias={2: 10.0}),
        dict(allowed_tokens_fn=lambda out: torch.tensor([i == 2 for i in range(V)])),
        dict(min_tokens=3, stop_token_ids=[1], output=(0,)),
    ],
    ids=["repetition", "frequency", "presence", "bias", "grammar", "min_tokens"],
)
def test_each_processing_step_moves_the_greedy_choice(params):
    logits = torch.tensor([[0.0, 5.0, 4.0, 0, 0, 0, 0, 0]])
    params = dict(params)  # the case's dict is shared by every run of it
    prompt = params.pop("prompt", (0,))
    output = params.pop("output", ())
    seq = _seq(prompt=prompt, output=output, temperature=0.0, **params)
    assert _sampler()(logits, [seq]).token_ids == [2]


# ---- truncation ----------------------------------------------------------------------


def _kept(scaled: torch.Tensor, **params) -> list[int]:
    out = Sampler._truncate(scaled[None, :], [SamplingParams(**params)])
    return [i for i, v in enumerate(out[0].tolist()) if v != -math.inf]


UNSORTED = _row(1.0, 4.0, 3.0, 0.5, 2.0, -1.0, 0.0, 3.5)


@pytest.mark.parametrize(("k", "kept"), [(1, [1]), (3, [1, 2, 7]), (V - 1, [0, 1, 2, 3, 4, 6, 7]), (V, list(range(V)))])
def test_top_k_keeps_the_k_likeliest_in_their_places(k, kept):
    assert _kept(UNSORTED, top_k=k) == kept


def test_top_k_above_the_vocabulary_keeps_everything():
    assert _kept(UNSORTED, top_k=V + 3) == list(range(V))


def test_nothing_to_truncate_returns_the_row_itself():
    scaled = UNSORTED[None, :]
    assert Sampler._truncate(scaled, [SamplingParams()]) is scaled


QUARTERS = _logits_of([0.125, 0.5, 0.25, 0.125])  # sorted: 0.5, 0.25, 0.125, 0.125


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [
        (0.49, [1]),
        (0.5, [1]),
        (0.51, [1, 2]),
        (0.75, [1, 2]),
        (0.76, [0, 1, 2]),
        (0.875, [0, 1, 2]),
        (0.9, [0, 1, 2, 3]),
    ],
)
def test_top_p_keeps_tokens_whose_likelier_mass_is_below_it(top_p, kept):
    assert _kept(QUARTERS, top_p=top_p) == kept


def test_top_p_one_keeps_even_the_vanishing_tail():
    row = torch.zeros(V, dtype=torch.float32)
    row[0] = 40.0
    assert _kept(row, top_p=1.0, top_k=0) == list(range(V))
    assert Sampler._truncate(row[None, :], [SamplingParams(top_p=1.0)]) is not None


def test_top_p_is_measured_over_what_top_k_kept():
    # top-2 of (0.5, 0.3, 0.2) renormalised is (0.625, 0.375): 0.6 keeps the first alone
    row = _logits_of([0.5, 0.3, 0.2])
    assert _kept(row, top_k=2, top_p=0.6) == [0]
    assert _kept(row, top_p=0.6) == [0, 1]


@pytest.mark.parametrize(
    ("min_p", "kept"), [(0.24, [1, 2, 3]), (0.25, [1, 2, 3]), (0.26, [1, 2]), (0.5, [1, 2]), (0.51, [1])]
)
def test_min_p_drops_tokens_below_its_share_of_the_likeliest(min_p, kept):
    assert _kept(_logits_of([0.0625, 0.5, 0.25, 0.125, 0.0625]), min_p=min_p) == kept


def test_each_row_of_a_batch_truncates_by_its_own_parameters():
    batch = torch.stack([UNSORTED, UNSORTED, QUARTERS.repeat(2)[:V]])
    params = [SamplingParams(top_k=2), SamplingParams(), SamplingParams(top_p=0.5)]
    out = Sampler._truncate(batch, params)
    finite = [[i for i, v in enumerate(r) if v != -math.inf] for r in out.tolist()]
    assert finite == [[1, 7], list(range(V)), [1, 5]]
    assert out[0, 1].item() == 4.0 and out[0, 7].item() == 3.5


def test_min_p_per_row():
    row = _logits_of([0.5, 0.25, 0.25])
    out = Sampler._truncate(torch.stack([row, row]), [SamplingParams(min_p=0.6), SamplingParams()])
    assert [[v != -math.inf for v in r] for r in out.tolist()] == [[True, False, False], [True, True, True]]


# ---- the draw --------------------------------------------------------------------------


def test_draws_follow_the_distribution():
    rows = 4000
    logits = _logits_of([0.7, 0.2, 0.1]).float().repeat(rows, 1)
    seqs = [_seq() for _ in range(rows)]
    tokens = _sampler(seed=3)(logits, seqs).token_ids
    shares = [tokens.count(t) / rows for t in range(3)]
    assert shares == pytest.approx([0.7, 0.2, 0.1], abs=0.03)


def test_temperature_flattens_the_draw():
    rows = 4000
    logits = _logits_of([0.7, 0.2, 0.1]).float().repeat(rows, 1)
    tokens = _sampler(seed=3)(logits, [_seq(temperature=100.0) for _ in range(rows)]).token_ids
    assert [tokens.count(t) / rows for t in range(3)] == pytest.approx([1 / 3] * 3, abs=0.04)


def test_a_seeded_row_draws_the_same_whatever_the_batch_and_the_sampler_seed():
    flat = torch.zeros(1, 64)

    def draws(sampler_seed, neighbours):
        generator = torch.Generator().manual_seed(9)
        seqs = [_seq() for _ in range(neighbours)] + [_seq(generator=generator)]
        sampler = _sampler(seed=sampler_seed, vocab=64)
        return [sampler(flat.repeat(neighbours + 1, 1), seqs).token_ids[-1] for _ in range(12)]

    assert draws(0, 0) == draws(1, 3)


def test_unseeded_rows_follow_the_sampler_seed():
    flat = torch.zeros(6, 64)
    seqs = [_seq() for _ in range(6)]
    a = [_sampler(seed=4, vocab=64)(flat, seqs).token_ids for _ in range(2)]
    b = [_sampler(seed=4, vocab=64)(flat, seqs).token_ids for _ in range(2)]
    c = [_sampler(seed=5, vocab=64)(flat, seqs).token_ids for _ in range(2)]
    assert a == b != c


def test_a_greedy_row_in_a_sampled_batch_takes_the_argmax():
    flat = torch.zeros(2, 256)
    flat[:, 7] = 0.01
    sampler = _sampler(seed=1, vocab=256)
    greedy = [sampler(flat, [_seq(), _seq(temperature=0.0)]).token_ids[1] for _ in range(20)]
    assert greedy == [7] * 20


# ---- logprobs --------------------------------------------------------------------------


def test_no_logprobs_asked_gives_none():
    logits = torch.zeros(2, V)
    assert _sampler()(logits, [_seq(temperature=0.0), _seq(temperature=0.0)]).logprobs is None
    assert _sampler()(logits, [_seq(), _seq()]).logprobs is None


def test_greedy_logprobs_are_of_the_processed_row_with_each_rows_alternatives():
    logits = torch.tensor([[0.0, 2.0, 1.0, 0, 0, 0, 0, 0]] * 3)
    seqs = [
        _seq(temperature=0.0, logprobs=2, logit_bias={2: 3.0}),
        _seq(temperature=0.0),
        _seq(temperature=0.0, logprobs=0),
    ]
    result = _sampler()(logits, seqs)
    assert result.token_ids == [2, 1, 1]
    expected = torch.log_softmax(torch.tensor([0.0, 2.0, 4.0, 0, 0, 0, 0, 0]), dim=-1)
    chosen, alternatives = result.logprobs[0]
    assert chosen == pytest.approx(expected[2].item())
    assert [i for i, _ in alternatives] == [2, 1]
    assert [v for _, v in alternatives] == pytest.approx([expected[2].item(), expected[1].item()])
    assert result.logprobs[1] is None
    assert result.logprobs[2][1] == []
    assert result.logprobs[2][0] == pytest.approx(torch.log_softmax(logits[2], dim=-1)[1].item())


def test_sampled_logprobs_are_after_temperature_and_before_truncation():
    logits = torch.tensor([[0.0, 2.0, 1.0, 0.5, 0, 0, 0, 0], [0.0, 2.0, 1.0, 0.5, 0, 0, 0, 0]])
    seqs = [_seq(temperature=2.0, top_k=1, logprobs=3), _seq(temperature=0.0, logprobs=1)]
    result = _sampler()(logits, seqs)
    assert result.token_ids == [1, 1]
    scaled = torch.log_softmax(logits[0] / 2.0, dim=-1)
    chosen, alternatives = result.logprobs[0]
    assert chosen == pytest.approx(scaled[1].item())
    assert [i for i, _ in alternatives] == [1, 2, 3]
    assert alternatives[2][1] == pytest.approx(scaled[3].item())
    plain = torch.log_softmax(logits[1], dim=-1)
    assert result.logprobs[1][0] == pytest.approx(plain[1].item())
    assert result.logprobs[1][1] == [(1, pytest.approx(plain[1].item()))]


def test_more_alternatives_than_the_vocabulary_gives_the_whole_vocabulary():
    logits = torch.arange(V, dtype=torch.float32)[None, :]
    result = _sampler()(logits, [_seq(temperature=0.0, logprobs=V + 5)])
    assert [i for i, _ in result.logprobs[0][1]] == list(reversed(range(V)))


# ---- what the first mutation run left open ---------------------------------------------


def test_repetition_penalty_divides_a_positive_logit_below_one():
    out = _process(_row(0.5, -0.5, 0, 0, 0, 0, 0, 0), _seq(prompt=(0, 1), repetition_penalty=2.0))
    assert out[:2] == [0.25, -1.0]


def test_min_tokens_bans_a_stop_id_of_zero():
    row = torch.zeros(V, dtype=torch.float64)
    out = _process(row, _seq(min_tokens=1, stop_token_ids=[0], ignore_eos=True))
    assert [i for i, v in enumerate(out) if v == -math.inf] == [0]


def test_a_temperature_below_one_sharpens():
    logits = torch.tensor([[0.0, 2.0, 1.0, 0, 0, 0, 0, 0]])
    result = _sampler()(logits, [_seq(temperature=0.5, logprobs=0)])
    chosen, _ = result.logprobs[0]
    token = result.token_ids[0]
    assert chosen == pytest.approx(torch.log_softmax(logits[0] / 0.5, dim=-1)[token].item())


def test_only_greedy_rows_are_forced_to_their_argmax():
    logits = torch.zeros(3, 256)
    logits[0, 7] = 0.01
    logits[1, 9] = 0.01
    logits[2, 7] = 0.01
    sampler = _sampler(seed=1, vocab=256)
    seqs = [_seq(temperature=0.0), _seq(temperature=0.0), _seq()]
    draws = [sampler(logits, seqs).token_ids for _ in range(20)]
    assert [d[:2] for d in draws] == [[7, 9]] * 20
    assert len({d[2] for d in draws}) > 5


def test_a_batch_asking_only_for_the_chosen_logprob():
    logits = torch.tensor([[0.0, 2.0, 1.0, 0, 0, 0, 0, 0]] * 2)
    for temperature in (0.0, 1.0):
        result = _sampler()(logits, [_seq(temperature=temperature, logprobs=0), _seq(temperature=temperature)])
        assert result.logprobs[0][1] == [] and result.logprobs[1] is None


def test_the_default_seed_is_zero():
    flat = torch.zeros(4, 64)
    seqs = [_seq() for _ in range(4)]
    assert Sampler(64, {EOS}, CPU)(flat, seqs).token_ids == _sampler(seed=0, vocab=64)(flat, seqs).token_ids


# ---- what the second run left open -----------------------------------------------------


def test_an_all_greedy_batch_draws_no_noise():
    sampler = _sampler(seed=2)
    before = sampler.generator.get_state()
    logits = torch.tensor([[0.0, 2.0, 1.0, 0, 0, 0, 0, 0]] * 2)
    assert sampler(logits, [_seq(temperature=0.0), _seq(temperature=0.0, logprobs=1)]).token_ids == [1, 1]
    assert torch.equal(sampler.generator.get_state(), before)


def test_penalties_are_computed_in_the_rows_precision():
    # 0.1 is not a float32: a penalty computed in float32 and subtracted from a float64 row shows
    row = torch.zeros(V, dtype=torch.float64)
    out = _process(row, _seq(output=(4, 4, 3), frequency_penalty=0.1, presence_penalty=0.1))
    assert out[4] == -(2 * 0.1 + 0.1)
    assert out[3] == -(0.1 + 0.1)
    row = torch.zeros(V, dtype=torch.float64)
    assert _process(row, _seq(output=(4,), presence_penalty=0.1))[4] == -0.1


def test_a_grammar_mask_of_ones_and_zeros_reads_as_allowed_and_not():
    mask = torch.tensor([0, 1, 0, 1, 0, 0, 0, 0])
    row = torch.zeros(V, dtype=torch.float64)
    out = _process(row, _seq(allowed_tokens_fn=lambda output: mask))
    assert [math.isfinite(v) for v in out] == [False, True, False, True, False, False, False, False]


def test_top_k_holds_under_a_top_p_just_below_one():
    # the two kept tokens' float32 mass sums to 0.99999988, under a top_p of 0.99999994: the
    # third token, dropped by top-k, has that mass before it and must stay dropped
    row = torch.tensor([27 / 64, 1 / 64, 1 / 64 - 0.01], dtype=torch.float32)
    assert _kept(row, top_k=2, top_p=0.99999994) == [0, 1]
    assert _kept(row, top_p=0.99999994) == [0, 1, 2]
