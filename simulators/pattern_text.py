"""Text that a regular expression or a small EBNF grammar accepts, chosen by a
seeded PRNG: what guided decoding with `regex` or `ebnf`/`grammar` makes a
model write.

Regexes are read with Python's own parser (`re._parser`), so the usual syntax
works: literals, classes, categories (`\\d`, `\\w`, `\\s`), groups, alternation
and repeats (unbounded ones stay short). Anchors and lookarounds are not
generated from; the result is checked with `re.fullmatch` and redrawn a few
times, and `PatternError` says when no draw matched.

Grammars are the GBNF subset the runtimes' examples use: `name ::= expr` rules
(`root`, or else the first rule, is the start), double- or single-quoted
literals, `[...]` classes, rule names, `( )` groups, `|`, and the repeats `*`,
`+`, `?`, `{m,n}`; `#` starts a comment. Anything else raises `PatternError`.
"""

from __future__ import annotations

import random
import re
import re._constants as C  # noqa: N812
import re._parser as sre
from typing import Any

_OPEN_REPEAT = 3  # extra repetitions drawn for `*`, `+` and `{m,}`
_CATEGORY_CHARS = {
    C.CATEGORY_DIGIT: "0123456789",
    C.CATEGORY_WORD: "abcdefghijklmnopqrstuvwxyz0123456789_",
    C.CATEGORY_SPACE: " ",
    C.CATEGORY_NOT_DIGIT: "abcxyz",
    C.CATEGORY_NOT_WORD: " -.,",
    C.CATEGORY_NOT_SPACE: "abcxyz",
}
_PRINTABLE = [chr(c) for c in range(32, 127)]


class PatternError(ValueError):
    """The pattern or grammar cannot be generated from."""


def matching_text(pattern: str, rng: random.Random) -> str:
    try:
        tree = sre.parse(pattern)
        compiled = re.compile(pattern)
    except re.error as exc:
        raise PatternError(f"invalid regex {pattern!r}: {exc}") from exc
    for _ in range(8):
        groups: dict[int, str] = {}
        text = _emit(tree, rng, groups)
        if compiled.fullmatch(text):
            return text
    raise PatternError(f"no text generated for the regex {pattern!r}")


def _emit(items: Any, rng: random.Random, groups: dict[int, str]) -> str:
    out = []
    for op, arg in items:
        if op is C.LITERAL:
            out.append(chr(arg))
        elif op is C.NOT_LITERAL:
            out.append(rng.choice([c for c in _PRINTABLE if ord(c) != arg]))
        elif op is C.ANY:
            out.append(rng.choice("abcxyz"))
        elif op is C.IN:
            out.append(_class_char(arg, rng))
        elif op is C.CATEGORY:
            out.append(rng.choice(_CATEGORY_CHARS.get(arg, "a")))
        elif op is C.BRANCH:
            out.append(_emit(rng.choice(arg[1]), rng, groups))
        elif op is C.SUBPATTERN:
            text = _emit(arg[3], rng, groups)
            if arg[0] is not None:
                groups[arg[0]] = text
            out.append(text)
        elif op is C.ATOMIC_GROUP:
            out.append(_emit(arg, rng, groups))
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            low, high, body = arg
            top = low + _OPEN_REPEAT if high is C.MAXREPEAT else min(high, low + _OPEN_REPEAT)
            out.extend(_emit(body, rng, groups) for _ in range(rng.randint(low, top)))
        elif op is C.GROUPREF:
            out.append(groups.get(arg, ""))
        # AT (anchors) and ASSERT / ASSERT_NOT add no characters.
    return "".join(out)


def _class_char(items: list[tuple[Any, Any]], rng: random.Random) -> str:
    negated = bool(items) and items[0][0] is C.NEGATE
    allowed: list[str] = []
    for op, arg in items[1:] if negated else items:
        if op is C.LITERAL:
            allowed.append(chr(arg))
        elif op is C.RANGE:
            allowed.extend(chr(c) for c in range(arg[0], min(arg[1], arg[0] + 200) + 1))
        elif op is C.CATEGORY:
            allowed.extend(_CATEGORY_CHARS.get(arg, ""))
    if negated:
        excluded = set(allowed)
        allowed = [c for c in _PRINTABLE if c not in excluded]
    return rng.choice(allowed) if allowed else "a"


# ---- EBNF (GBNF) -------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:(?P<comment>\#[^\n]*)|(?P<rule>[A-Za-z_][\w-]*)\s*::=|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<cls>\[(?:[^\]\\]|\\.)*\])"""
    r"""|(?P<name>[A-Za-z_][\w-]*)|(?P<rep>\{\d+(?:,\d*)?\})|(?P<op>[|()*+?]))"""
)
_MAX_RULE_DEPTH = 12  # deeper than this, the shortest alternative is taken


def grammar_text(grammar: str, rng: random.Random) -> str:
    rules, start = _parse_grammar(grammar)
    return _derive(("ref", start), rules, rng, 0)


def _parse_grammar(grammar: str) -> tuple[dict[str, Any], str]:
    tokens = []
    source = grammar.rstrip()
    at = 0
    while at < len(source):
        match = _TOKEN.match(source, at)
        if match is None:
            raise PatternError(f"cannot read the grammar near {source[at : at + 20]!r}")
        if match.lastgroup != "comment":
            tokens.append((match.lastgroup, match.group(match.lastgroup or 0)))
        at = match.end()
    rules: dict[str, Any] = {}
    order: list[str] = []
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        if kind != "rule":
            raise PatternError(f"expected `name ::=` in the grammar, got {value!r}")
        end = next((j for j in range(i + 1, len(tokens)) if tokens[j][0] == "rule"), len(tokens))
        name = value
        rules[name] = _Expr(tokens[i + 1 : end]).alternatives()
        order.append(name)
        i = end
    if not rules:
        raise PatternError("the grammar has no rules")
    start = "root" if "root" in rules else order[0]
    for node in rules.values():
        _check_refs(node, rules)
    return rules, start


class _Expr:
    """A recursive-descent reader of one rule's right-hand side."""

    def __init__(self, tokens: list[tuple[str | None, str]]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> tuple[str | None, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def alternatives(self) -> Any:
        options = [self.sequence()]
        while self.peek() == ("op", "|"):
            self.at += 1
            options.append(self.sequence())
        if self.peek() not in (None, ("op", ")")):
            raise PatternError(f"unexpected {self.peek()!r} in the grammar")
        return ("alt", options)

    def sequence(self) -> Any:
        items = []
        while (token := self.peek()) is not None and token not in (("op", "|"), ("op", ")")):
            items.append(self.repeated(self.atom()))
        return ("seq", items)

    def atom(self) -> Any:
        kind, value = self.tokens[self.at]
        self.at += 1
        if kind == "str":
            return ("lit", _unquote(value))
        if kind == "cls":
            return ("cls", value)
        if kind == "name":
            return ("ref", value)
        if (kind, value) == ("op", "("):
            inner = self.alternatives()
            if self.peek() != ("op", ")"):
                raise PatternError("unbalanced parentheses in the grammar")
            self.at += 1
            return inner
        raise PatternError(f"unexpected {value!r} in the grammar")

    def repeated(self, node: Any) -> Any:
        token = self.peek()
        if token is None:
            return node
        kind, value = token
        if kind == "op" and value in "*+?":
            self.at += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[value]
            return ("rep", node, low, high)
        if kind == "rep":
            self.at += 1
            low_text, _, high_text = value.strip("{}").partition(",")
            high = int(high_text) if high_text else (None if "," in value else int(low_text))
            return ("rep", node, int(low_text), high)
        return node


def _unquote(literal: str) -> str:
    body = literal[1:-1]
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _check_refs(node: Any, rules: dict[str, Any]) -> None:
    kind = node[0]
    if kind == "ref" and node[1] not in rules:
        raise PatternError(f"the grammar uses the undefined rule {node[1]!r}")
    if kind in ("alt", "seq"):
        for child in node[1]:
            _check_refs(child, rules)
    if kind == "rep":
        _check_refs(node[1], rules)


def _derive(node: Any, rules: dict[str, Any], rng: random.Random, depth: int) -> str:
    kind = node[0]
    if kind == "lit":
        return str(node[1])
    if kind == "cls":
        return matching_text(node[1], rng)
    if kind == "ref":
        if depth > 4 * _MAX_RULE_DEPTH:
            raise PatternError("the grammar does not terminate")
        return _derive(rules[node[1]], rules, rng, depth + 1)
    if kind == "seq":
        return "".join(_derive(child, rules, rng, depth) for child in node[1])
    if kind == "alt":
        options = node[1]
        if depth > _MAX_RULE_DEPTH:
            options = sorted(options, key=_refs_in)[:1]
        return _derive(rng.choice(options), rules, rng, depth)
    _, body, low, high = node
    top = low if depth > _MAX_RULE_DEPTH else (low + _OPEN_REPEAT if high is None else min(high, low + _OPEN_REPEAT))
    return "".join(_derive(body, rules, rng, depth) for _ in range(rng.randint(low, top)))


def _refs_in(node: Any) -> int:
    kind = node[0]
    if kind == "ref":
        return 1
    if kind in ("alt", "seq"):
        return sum(_refs_in(child) for child in node[1])
    if kind == "rep":
        return _refs_in(node[1]) * max(1, node[2])
    return 0
