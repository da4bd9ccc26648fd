"""adapters/base.py's own rules, on their own: the choices a request starts (one prompt's n,
several prompts' sum), a usage's total, which sampling parameters a runtime's table finds
asked for (neutral values ask nothing; a top_k of 0 or less is no cut), and what an adapter
that declares nothing more answers (an unknown load, a 400 for a one-shot call it does not serve)."""

from __future__ import annotations

import pytest

from adapters.base import (
    Adapter,
    GenerationRequest,
    Health,
    LoadSnapshot,
    ParameterSupport,
    SamplingParams,
    Usage,
    total_choices,
)
from adapters.errors import GatewayError
from adapters.oneshot import DetokenizeRequest, EmbeddingRequest, TokenizeRequest


def request(n: int) -> GenerationRequest:
    return GenerationRequest("r", "m", prompt="hi", sampling=SamplingParams(n=n))


@pytest.mark.parametrize(("ns", "total"), [([3], 3), ([2, 3], 5), ([1, 4, 2], 7)])
def test_the_choices_a_request_starts_are_its_prompts_n_summed(ns, total) -> None:
    assert total_choices([request(n) for n in ns]) == total


def test_a_usage_totals_prompt_and_completion_tokens() -> None:
    assert Usage(prompt_tokens=7, completion_tokens=5, cached_tokens=3).total_tokens == 12


def test_a_parameter_is_rejected_emulated_or_passed_as_the_table_says() -> None:
    table = ParameterSupport(emulated={"seed": "per choice"}, rejected={"top_k": "no top-k"})
    assert [table.support(n) for n in ("top_k", "seed", "temperature")] == ["reject", "emulate", "pass"]
    both = ParameterSupport(emulated={"seed": "x"}, rejected={"seed": "y"})
    assert both.support("seed") == "reject"  # a rejection wins over an emulation


REJECT_ALL = ParameterSupport(
    rejected={"min_p": "-", "top_k": "-", "logit_bias": "-", "seed": "-", "n": "-", "ignore_eos": "-"}
)


@pytest.mark.parametrize(
    ("sampling", "asked"),
    [
        (SamplingParams(), []),
        (SamplingParams(min_p=0.0, top_k=0, logit_bias={}, seed=0, ignore_eos=False), []),
        (SamplingParams(top_k=-1), []),  # no top-k cut
        (SamplingParams(top_k=1), ["top_k"]),  # the smallest cut
        (SamplingParams(top_k=None, min_p=0.1), ["min_p"]),
        (SamplingParams(n=1), []),  # one choice asks nothing of a runtime without n
        (SamplingParams(n=2), ["n"]),
        # table order (docs/adapters.md), not the order the runtime's table names them
        (
            SamplingParams(ignore_eos=True, seed=3, logit_bias={1: 1.0}, top_k=5),
            ["top_k", "logit_bias", "seed", "ignore_eos"],
        ),
    ],
)
def test_the_rejected_parameters_a_request_asks_something_of(sampling, asked) -> None:
    assert REJECT_ALL.unsupported(sampling) == asked


def test_a_table_rejecting_nothing_finds_nothing_asked() -> None:
    assert ParameterSupport(emulated={"top_k": "x"}).unsupported(SamplingParams(top_k=5, seed=1)) == []


class Bare(Adapter):
    runtime = "test"

    def generate(self, request):  # pragma: no cover - not called
        raise NotImplementedError

    async def health(self) -> Health:
        return Health(True)

    async def models(self) -> list[str]:
        return ["m"]


async def test_an_adapter_that_declares_nothing_more() -> None:
    adapter = Bare("backend-1")
    assert adapter.name == "backend-1"
    load = await adapter.load()
    assert isinstance(load, LoadSnapshot) and (load.waiting, load.running, load.kv_usage) == (None, None, None)
    assert await adapter.aclose() is None


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (lambda a: a.embed(EmbeddingRequest("r", "m", inputs=["x"])), "embeddings"),
        (lambda a: a.tokenize(TokenizeRequest("r", "m", prompt="x")), "tokenize"),
        (lambda a: a.detokenize(DetokenizeRequest("r", "m", tokens=[1])), "detokenize"),
    ],
)
async def test_a_one_shot_call_an_adapter_does_not_serve_is_a_400(call, what) -> None:
    with pytest.raises(GatewayError) as info:
        await call(Bare("b"))
    err = info.value
    assert (err.status, err.param, err.code) == (400, "model", "unsupported_by_runtime")
    assert str(err) == f"The backend serving this model does not serve {what}."
