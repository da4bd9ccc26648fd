"""Where in a schema the grammar engine's complaint comes from.

llguidance reports what is wrong ("Unimplemented keys: [\"not\"]", "regex parse
error ...") but not where; for a large schema the user needs the place. On the error
path only, each sub-schema is compiled on its own (with the root's definitions, so
local `$ref`s still resolve) and the deepest one that fails the same way is reported
as a JSON pointer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

_CHILD_SCHEMA = ("items", "additionalProperties", "contains", "propertyNames", "not", "if", "then", "else")
_CHILD_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_CHILD_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAX_DEPTH = 32


def locate_failure(schema: dict, error_of: Callable[[dict], str]) -> str:
    """JSON pointer of the deepest sub-schema whose own error equals the root's ("" = root)."""
    root_error = error_of(schema)
    if not root_error:
        return ""
    definitions = {k: schema[k] for k in ("$defs", "definitions") if isinstance(schema.get(k), dict)}
    path: list[str] = []
    node = schema
    for _ in range(_MAX_DEPTH):
        for step, child in _children(node):
            standalone = {**definitions, **child, "x-guidance": schema.get("x-guidance", {})}
            if error_of(standalone) == root_error:
                path += step
                node = child
                break
        else:
            break
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in path)


def _children(node: dict) -> Iterator[tuple[list[str], dict]]:
    """(pointer tokens, sub-schema) for each direct sub-schema of `node`."""
    for key in _CHILD_SCHEMA:
        if isinstance(node.get(key), dict):
            yield [key], node[key]
    for key in _CHILD_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            for name, child in value.items():
                if isinstance(child, dict):
                    yield [key, str(name)], child
    for key in _CHILD_LISTS:
        value = node.get(key)
        if isinstance(value, list):
            for i, child in enumerate(value):
                if isinstance(child, dict):
                    yield [key, str(i)], child
