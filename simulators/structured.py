"""Guided decoding without a model: what a constrained request's output is.

A runtime module reads its own request fields into a `Constraint` (see
`structured_requests.py`); the synthetic token source then writes, for each
choice, a document the constraint accepts (a JSON value valid against the
schema, a string the regex or grammar accepts, one of the choices), drawn by a
PRNG seeded from the request like the free text is, and cut into token-sized
pieces. `max_tokens` still applies: a document longer than the budget is cut
there and the choice finishes with `length`, as a runtime's would.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

from simulators.pattern_text import grammar_text, matching_text
from simulators.schema_values import SchemaValues

# A word with the spaces before it, or one or two punctuation characters: about
# how a BPE tokenizer cuts JSON (`{"`, `answer`, `":`, ` "`, `yes`, `"}`).
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s]{1,2})|\s+")
ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True, slots=True)
class Constraint:
    """What the output of a constrained request may be."""

    kind: str  # "json" | "regex" | "grammar" | "choice"
    schema: Any = None  # json: the schema
    pattern: str = ""  # regex or grammar text
    choices: tuple[str, ...] = ()
    compact: bool = False  # JSON written without spaces after "," and ":"
    declared_only: bool = False  # objects get their declared properties only

    def document(self, rng: random.Random) -> str:
        if self.kind == "json":
            value = SchemaValues(self.schema, rng, self.declared_only).value()
            separators = (",", ":") if self.compact else (", ", ": ")
            return json.dumps(value, ensure_ascii=False, separators=separators)
        if self.kind == "regex":
            return matching_text(self.pattern, rng)
        if self.kind == "grammar":
            return grammar_text(self.pattern, rng)
        return rng.choice(self.choices)

    def check(self) -> None:
        """Raise `PatternError` when nothing can be generated (a broken regex or grammar)."""
        self.document(random.Random(0))


def pieces(text: str) -> list[str]:
    """`text` cut into token-sized pieces that join back into it."""
    found = _PIECE.findall(text)
    return found if "".join(found) == text else [text[i : i + 4] for i in range(0, len(text), 4)]
