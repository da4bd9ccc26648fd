"""Synthetic prompt text of a requested size in tokens.

The text is common English words drawn at random after a head that makes each
prompt unique ("request 12: turn 0:"). With a token counter (bench/token_count.py)
the words are chosen so that the whole text counts `target` tokens: each word's
cost is measured once in context, words are added while they fit, and the
finished text is counted again and corrected one word at a time (a tokenizer
may merge across word boundaries). Without one, `target` words are written and
the size is an estimate, reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.token_count import CountMethod, TokenCounter

# Words most BPE vocabularies encode as one token each, with the leading space.
WORDS: tuple[str, ...] = tuple(
    """the of and to in is for on with as at by from this that time year people way day man thing woman life
    child world school state family student group country problem hand part place case week company system
    program question work government number night point home water room mother area money story fact month
    lot right study book eye job word business issue side kind head house service friend father power hour
    game line end member law car city name team minute idea kid body back parent face level office door
    health person art war history party result change morning reason research""".split()
)
ESTIMATE = CountMethod("estimate", "one synthetic word counted as one token (no /tokenize endpoint, no --tokenizer)")
MAX_CORRECTIONS = 8
ANCHOR = "x"  # counted before each word, so a word's cost is its cost after a space, as in a prompt


@dataclass(frozen=True, slots=True)
class SizedText:
    text: str
    words: int  # synthetic words after the head
    tokens: int | None  # the whole text's size as counted; None when it is an estimate


def words(rng: np.random.Generator, n: int) -> str:
    idx = rng.integers(0, len(WORDS), size=max(n, 0))
    return " ".join(WORDS[i] for i in idx)


class PromptSizer:
    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter = counter
        self._costs: dict[str, int] | None = None

    @property
    def method(self) -> CountMethod:
        return self.counter.method if self.counter is not None else ESTIMATE

    def text(self, rng: np.random.Generator, head: str, target: int) -> SizedText:
        """`head` followed by words, `target` tokens in all (words, for an estimate)."""
        counter = self.counter
        if counter is None:
            return SizedText(f"{head} {words(rng, target)}", max(target, 0), None)
        if self._costs is None:
            base = counter.count(ANCHOR)
            self._costs = {w: max(1, counter.count(f"{ANCHOR} {w}") - base) for w in WORDS}
        chosen = self._fill(rng, self._costs, target - counter.count(head))
        return self._correct(rng, counter, self._costs, head, chosen, target)

    @staticmethod
    def _fill(rng: np.random.Generator, costs: dict[str, int], budget: int) -> list[str]:
        """Random words while they fit the budget, then random ones among those that still fit."""
        chosen: list[str] = []
        left = budget
        for i in rng.integers(0, len(WORDS), size=max(budget, 0)):
            if left <= 0:
                break
            word = WORDS[i]
            if costs[word] > left:
                fitting = [w for w in WORDS if costs[w] <= left]
                if not fitting:
                    break
                word = fitting[int(rng.integers(0, len(fitting)))]
            chosen.append(word)
            left -= costs[word]
        return chosen

    @staticmethod
    def _correct(
        rng: np.random.Generator,
        counter: TokenCounter,
        costs: dict[str, int],
        head: str,
        chosen: list[str],
        target: int,
    ) -> SizedText:
        cheapest = [w for w in WORDS if costs[w] == min(costs.values())]

        def render(ws: list[str]) -> str:
            return " ".join([head, *ws])

        best = (render(chosen), len(chosen), counter.count(render(chosen)))
        for _ in range(MAX_CORRECTIONS):
            n = counter.count(render(chosen))
            if abs(n - target) < abs(best[2] - target):
                best = (render(chosen), len(chosen), n)
            if n == target or (n > target and not chosen):
                break
            if n > target:
                chosen = chosen[:-1]
            else:
                chosen = [*chosen, cheapest[int(rng.integers(0, len(cheapest)))]]
        return SizedText(*best)
