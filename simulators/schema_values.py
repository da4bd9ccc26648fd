"""A JSON value that satisfies a JSON schema, chosen by a seeded PRNG: what a
runtime's guided decoding makes a model write, without the model.

Covered: `type` (one or a list), `const`, `enum`, objects (`properties`,
`required`, `additionalProperties`, `minProperties`), strings (`minLength`,
`maxLength`, `pattern`, `format` date, date-time, time, email, uri, uuid,
ipv4), integers and numbers (`minimum`, `maximum`, their exclusive forms,
`multipleOf`), booleans, null, arrays (`items`, `prefixItems`, `minItems`,
`maxItems`, `uniqueItems`), `anyOf` / `oneOf` (one branch is picked), `allOf`
(its branches merged) and `$ref` to `#`, `#/$defs/...` or `#/definitions/...`.
Optional object properties are included at random, so one schema yields
documents of several shapes; required ones always are. A schema without any
constraint (`{}` or `true`) gets a short string.
"""

from __future__ import annotations

import random
from typing import Any, TypeVar

from simulators.pattern_text import matching_text

T = TypeVar("T")
WORDS = "alpha beta gamma delta omega red blue green paris tokyo lima seven river stone cloud".split()
_GROWTH_DEPTH = 6  # below this, only what the schema requires: recursive schemas end
_REF_DEPTH = 64  # `$ref` chains longer than this are not followed
_FORMATS = {
    "date": "2024-05-17",
    "date-time": "2024-05-17T10:30:00Z",
    "time": "10:30:00",
    "email": "sim@example.com",
    "uri": "https://example.com/sim",
    "uuid": "123e4567-e89b-42d3-a456-426614174000",
    "ipv4": "192.0.2.7",
}


class SchemaValues:
    """Values for one root schema (the root is what `$ref` paths start from)."""

    def __init__(self, root: Any, rng: random.Random, declared_only: bool = False) -> None:
        self.root = root
        self.rng = rng
        # Objects get only their declared properties (TGI's schema-to-regex ignores
        # `additionalProperties`, so `{"properties": {}}` only ever yields `{}`).
        self.declared_only = declared_only

    def value(self) -> Any:
        return self.of(self.root, 0)

    def of(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict):
            return self.text({}) if schema is not False else None
        schema = self.resolved(schema, depth)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                merged = {k: v for k, v in schema.items() if k != key}
                return self.of({**merged, **self.resolved(self.rng.choice(branches), depth)}, depth + 1)
        kind = self.kind(schema)
        if kind == "object":
            return self.obj(schema, depth)
        if kind == "array":
            return self.array(schema, depth)
        if kind == "integer":
            return self.integer(schema)
        if kind == "number":
            return self.number(schema)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self.text(schema)

    def resolved(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        """The schema with its `$ref` followed and its `allOf` merged in."""
        ref = schema.get("$ref")
        if isinstance(ref, str) and depth < _REF_DEPTH:
            target = self.lookup(ref)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**self.resolved(target, depth + 1), **rest}
        parts = schema.get("allOf")
        if isinstance(parts, list):
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                if isinstance(part, dict):
                    merged = merge(merged, self.resolved(part, depth + 1))
            schema = merged
        return schema

    def lookup(self, ref: str) -> dict[str, Any]:
        node: Any = self.root
        for part in ref.removeprefix("#").strip("/").split("/") if ref != "#" else []:
            node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}

    def kind(self, schema: dict[str, Any]) -> str | None:
        kind = schema.get("type")
        if isinstance(kind, list):
            options = [k for k in kind if k != "null"] or kind
            return str(self.rng.choice(options)) if options else None
        if isinstance(kind, str):
            return kind
        if "properties" in schema or "required" in schema:
            return "object"
        if "items" in schema or "prefixItems" in schema:
            return "array"
        if "minimum" in schema or "maximum" in schema:
            return "number"
        return None

    def obj(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props = _field(schema, "properties", dict, {})
        required = [k for k in schema.get("required") or [] if isinstance(k, str)]
        optional = 0.5 if depth < _GROWTH_DEPTH else 0.0
        keys = [k for k in props if k in required or self.rng.random() < optional]
        keys += [k for k in required if k not in props]
        out: dict[str, Any] = {key: self.of(props.get(key, {}), depth + 1) for key in keys}
        wanted = _field(schema, "minProperties", int, 0)
        for key in props:
            if len(out) >= wanted:
                break
            out.setdefault(key, self.of(props[key], depth + 1))
        extra = schema.get("additionalProperties")
        if not props and extra is not False and not self.declared_only and len(out) < max(wanted, 1):
            value_schema = extra if isinstance(extra, dict) else {"type": "string"}
            for key in self.rng.sample(WORDS, max(wanted, 1) - len(out)):
                out[key] = self.of(value_schema, depth + 1)
        return out

    def array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        low = _field(schema, "minItems", int, 0)
        high = _field(schema, "maxItems", int, low + 3)
        prefix = _field(schema, "prefixItems", list, [])
        items = schema.get("items")
        if items is False:
            high = min(high, len(prefix))
        count = self.rng.randint(low, max(low, min(high, low + 3))) if depth < _GROWTH_DEPTH else low
        out: list[Any] = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items if isinstance(items, dict) else {}
            value = self.of(sub, depth + 1)
            for _ in range(8):  # a few draws to keep `uniqueItems`
                if not schema.get("uniqueItems") or value not in out:
                    break
                value = self.of(sub, depth + 1)
            out.append(value)
        return out

    def integer(self, schema: dict[str, Any]) -> int:
        low, high = bounds(schema, step=1)
        low_i, high_i = int(_ceil(low)), int(_floor(high))
        step = schema.get("multipleOf")
        if isinstance(step, int) and not isinstance(step, bool) and step > 0:
            first = -(-low_i // step) * step
            choices = range(first, high_i + 1, step)
            return self.rng.choice(choices) if choices else first
        return self.rng.randint(low_i, max(low_i, high_i))

    def number(self, schema: dict[str, Any]) -> float | int:
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
            low, high = bounds(schema, step=step)
            first, last = _ceil(low / step), _floor(high / step)
            return self.rng.randint(first, max(first, last)) * step
        low, high = bounds(schema, step=0.01)
        return round(self.rng.uniform(low, high), 2) if high > low else low

    def text(self, schema: dict[str, Any]) -> str:
        fmt = schema.get("format")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            return matching_text(pattern, self.rng)
        low = _field(schema, "minLength", int, 1)
        high = _field(schema, "maxLength", int, max(low, 24))
        if isinstance(fmt, str) and fmt in _FORMATS and low <= len(_FORMATS[fmt]) <= high:
            return _FORMATS[fmt]
        text = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 3)))
        while len(text) < low:
            text += " " + self.rng.choice(WORDS)
        return text[: max(low, high)]


def bounds(schema: dict[str, Any], step: float) -> tuple[float, float]:
    """The closed range a number may take (exclusive bounds moved in by `step`)."""
    low = _number(schema.get("minimum"))
    high = _number(schema.get("maximum"))
    exclusive_low = _number(schema.get("exclusiveMinimum"))
    exclusive_high = _number(schema.get("exclusiveMaximum"))
    if exclusive_low is not None:
        low = max(low, exclusive_low + step) if low is not None else exclusive_low + step
    if exclusive_high is not None:
        high = min(high, exclusive_high - step) if high is not None else exclusive_high - step
    if low is None:
        low = min(0.0, high - 100) if high is not None else 0.0
    if high is None:
        high = low + 100
    return low, max(low, high)


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two schemas that must both hold, merged the simple way: properties and
    `required` united, other keywords taken from the later one."""
    out = {**a, **b}
    if isinstance(a.get("properties"), dict) or isinstance(b.get("properties"), dict):
        out["properties"] = {**(a.get("properties") or {}), **(b.get("properties") or {})}
    if a.get("required") or b.get("required"):
        out["required"] = list(dict.fromkeys([*(a.get("required") or []), *(b.get("required") or [])]))
    return out


def _field(schema: dict[str, Any], key: str, kind: type[T], default: T) -> T:
    """`schema[key]` when it is a `kind`, else `default` (booleans are not integers here)."""
    value = schema.get(key)
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _ceil(value: float) -> int:
    return -int(-value // 1)


def _floor(value: float) -> int:
    return int(value // 1)
