"""Token sources: what the simulated engine generates.

A `Generation` yields `Token`s for one request (all its choices, interleaved per
decode step). The token that ends a choice carries `finish`:

- `"eos"`: the model emitted EOS. That token's text is `""`, as a special token
  detokenizes to nothing, and it counts as a completion token (as in vLLM/TGI).
- `"length"`: `max_tokens` reached; the last token carries text.
- `"stop_sequence"`: a stop string matched; the text is cut before it, `matched`
  holds the string.
- `"abort"` / `"repetition"`: engine-side endings some runtimes report.

The synthetic source needs no model: it draws words from a fixed vocabulary with a
PRNG seeded by (`--seed`, the request's `seed`, the choice index, the prompt), so
one request always gets the same answer. It sleeps `ttft_ms` before the first step
and `itl_ms` between steps; with both 0 it never sleeps, which is what lets one
process serve thousands of requests per second.
"""

from __future__ import annotations

import asyncio
import random
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from simulators.request import SimRequest
from simulators.structured import pieces

EOS_TOKEN_ID = 2
VOCAB_OFFSET = 100  # token ids of vocabulary words start here

VOCABULARY = (
    "the a of and to in is it that on for with as was at by this be from or an are "
    "not but have had they which you one all were we when there can their has been "
    "more if will would who so no its time only new some could these two may then do "
    "first any like now my such over our even most made after also did many before "
    "must through back years where much your way down should because each just those"
).split()


@dataclass(slots=True)
class Token:
    index: int  # choice index
    text: str
    token_id: int
    finish: str | None = None
    matched: str | int | None = None


class Generation:
    """One request's generation. Iterate it for tokens; `abort()` ends every
    unfinished choice with an `"abort"` token at the next step."""

    prompt_tokens: int = 0

    def __aiter__(self) -> AsyncIterator[Token]:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


def choice_budget(request: SimRequest, default_output: int, max_model_len: int) -> tuple[int, bool]:
    """(tokens to generate, whether the last one ends by length rather than EOS)."""
    room = max(1, max_model_len - request.context_tokens)
    cap = min(request.max_tokens, room) if request.max_tokens is not None else room
    natural = request.faults.output_tokens if request.faults.output_tokens is not None else default_output
    if request.ignore_eos:
        return max(1, cap), True
    if natural >= cap:
        return max(1, cap), True
    return max(1, natural), False


class SyntheticGeneration(Generation):
    def __init__(
        self,
        request: SimRequest,
        *,
        seed: int,
        default_output: int,
        max_model_len: int,
        ttft_ms: float,
        itl_ms: float,
        fixed_text: list[str] | None = None,
    ) -> None:
        self.request = request
        self.prompt_tokens = request.prompt_tokens
        faults = request.faults
        self.ttft = (faults.ttft_ms if faults.ttft_ms is not None else ttft_ms) / 1000.0
        self.itl = (faults.itl_ms if faults.itl_ms is not None else itl_ms) / 1000.0
        self._aborted = False
        self._wake: asyncio.Future[None] | None = None
        self._choices = [
            self._plan(request, i, seed, default_output, max_model_len, fixed_text) for i in range(max(1, request.n))
        ]

    def abort(self) -> None:
        self._aborted = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    @staticmethod
    def _plan(
        request: SimRequest,
        index: int,
        seed: int,
        default_output: int,
        max_model_len: int,
        fixed_text: list[str] | None,
    ) -> list[Token]:
        if fixed_text is not None:  # a tool call's argument fragments, then EOS
            scripted = [Token(index, t, VOCAB_OFFSET + i) for i, t in enumerate(fixed_text)]
            scripted.append(Token(index, "", EOS_TOKEN_ID, finish="eos", matched=EOS_TOKEN_ID))
            return scripted
        key = f"{seed}:{request.seed}:{index}:{zlib.crc32(' '.join(request.prompt_words[-64:]).encode())}"
        if request.constraint is not None:
            document = request.constraint.document(random.Random(f"{key}:constrained"))
            return _constrained(request, index, pieces(document), max_model_len)
        count, by_length = choice_budget(request, default_output, max_model_len)
        rng = random.Random(key)
        words = rng.choices(range(len(VOCABULARY)), k=count)
        tokens: list[Token] = []
        word_count = count if by_length else count - 1  # the EOS token is the last one
        texts = [VOCABULARY[words[p]] if p == 0 else " " + VOCABULARY[words[p]] for p in range(word_count)]
        hit = _first_stop("".join(texts), request.stop) if request.stop else None
        start = 0
        for position, text in enumerate(texts):
            end = start + len(text)
            if hit is not None and end >= hit[0] + len(hit[1]):
                # This token completes the stop string: like the real runtimes, the
                # output ends where the match begins, and text that could start the
                # match was never released (tokens inside it carry no text).
                cut, matched = hit
                tokens.append(
                    Token(
                        index,
                        text[: max(0, cut - start)],
                        VOCAB_OFFSET + words[position],
                        finish="stop_sequence",
                        matched=matched,
                    )
                )
                return tokens
            if hit is not None and end > hit[0]:
                text = text[: max(0, hit[0] - start)]
            tokens.append(Token(index, text, VOCAB_OFFSET + words[position]))
            start = end
        if by_length:
            tokens[-1].finish = "length"
        else:
            tokens.append(Token(index, "", EOS_TOKEN_ID, finish="eos", matched=EOS_TOKEN_ID))
        forced = request.faults.finish
        if forced:
            tokens[-1].finish = forced
            tokens[-1].matched = None
        return tokens

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the request is aborted."""
        if seconds <= 0 or self._aborted:
            return
        if self._wake is None:
            self._wake = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._wake], timeout=seconds)

    async def __aiter__(self) -> AsyncIterator[Token]:  # type: ignore[override]
        await self._sleep(self.ttft)
        finished = [False] * len(self._choices)
        step = 0
        while not all(finished):
            if step:
                await self._sleep(self.itl)
            for i, tokens in enumerate(self._choices):
                if finished[i]:
                    continue
                if self._aborted:
                    finished[i] = True
                    yield Token(i, "", EOS_TOKEN_ID, finish="abort")
                    continue
                token = tokens[step]
                if token.finish:
                    finished[i] = True
                yield token
            step += 1


def _constrained(request: SimRequest, index: int, parts: list[str], max_model_len: int) -> list[Token]:
    """A constrained document's pieces, then EOS; `max_tokens` (or the context) cuts it
    short with finish `length`, leaving an unfinished document as a runtime would."""
    room = max(1, max_model_len - request.context_tokens)
    cap = min(request.max_tokens, room) if request.max_tokens is not None else room
    tokens = [Token(index, text, VOCAB_OFFSET + i) for i, text in enumerate(parts[: max(1, cap)])]
    if len(parts) + 1 > cap:
        tokens[-1].finish = "length"
    else:
        tokens.append(Token(index, "", EOS_TOKEN_ID, finish="eos", matched=EOS_TOKEN_ID))
    if request.faults.finish:
        tokens[-1].finish = request.faults.finish
        tokens[-1].matched = None
    return tokens


def _first_stop(text: str, stops: list[str]) -> tuple[int, str] | None:
    """The earliest match of any stop string in `text`: (position, stop)."""
    best: tuple[int, str] | None = None
    for stop in stops:
        if not stop:
            continue
        at = text.find(stop)
        if at != -1 and (best is None or at < best[0]):
            best = (at, stop)
    return best


class SyntheticSource:
    """Makes `SyntheticGeneration`s with the CLI's timing and length settings."""

    name = "synthetic"

    def __init__(self, *, seed: int, output_tokens: int, max_model_len: int, ttft_ms: float, itl_ms: float) -> None:
        self.seed = seed
        self.output_tokens = output_tokens
        self.max_model_len = max_model_len
        self.ttft_ms = ttft_ms
        self.itl_ms = itl_ms

    def generate(self, request: SimRequest, fragments: list[str] | None = None) -> Generation:
        """A generation of synthetic words, or of given text fragments (a tool call's
        arguments) with this source's timing."""
        return SyntheticGeneration(
            request,
            seed=self.seed,
            default_output=self.output_tokens,
            max_model_len=self.max_model_len,
            ttft_ms=self.ttft_ms,
            itl_ms=self.itl_ms,
            fixed_text=fragments,
        )
