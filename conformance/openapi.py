"""Objects judged against OpenAI's published OpenAPI schemas (the vendored excerpt
in conformance/openai_openapi/, README there): the `response` object, each event
of its stream, the input item list, and the embeddings answer.

The hand-written validators of conformance/schema.py are this suite's own reading
of the spec; this module is the spec itself, checked by `jsonschema` (OpenAPI 3.1
schemas are JSON Schema 2020-12). Each issue names the JSON path that broke it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from conformance.schema import FieldIssue, show

SCHEMAS = Path(__file__).with_name("openai_openapi") / "schemas.json"


@functools.cache
def _document() -> dict[str, Any]:
    return json.loads(SCHEMAS.read_text(encoding="utf-8"))


@functools.cache
def _validator(name: str) -> Any:
    import jsonschema  # the `conformance` extra installs it; imported here so the rest of the suite needs none

    document = _document()
    if name not in document["components"]["schemas"]:
        raise KeyError(f"{name} is not in the vendored schemas")
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    return jsonschema.Draft202012Validator(schema)


def openapi_issues(value: Any, name: str, limit: int = 10) -> list[FieldIssue]:
    """Where `value` breaks the published schema `name` (empty: it conforms)."""
    import jsonschema

    issues = []
    for error in sorted(_validator(name).iter_errors(value), key=lambda e: list(e.absolute_path))[:limit]:
        best = jsonschema.exceptions.best_match([error]) if error.context else error
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in best.absolute_path)
        issues.append(FieldIssue(path, f"{name}: {best.message[:200]}", show(best.instance)))
    return issues


@functools.cache
def _stream_event_schemas() -> dict[str, str]:
    """Event `type` -> the schema of that event (ResponseStreamEvent's discriminator)."""
    schemas = _document()["components"]["schemas"]
    out = {}
    for branch in schemas["ResponseStreamEvent"]["anyOf"]:
        name = branch["$ref"].rsplit("/", 1)[-1]
        kinds = schemas[name]["properties"]["type"].get("enum") or []
        out.update({kind: name for kind in kinds})
    return out


def stream_event_issues(event: Any, limit: int = 10) -> list[FieldIssue]:
    """A Responses stream event against the schema its `type` names (judged as one
    branch of ResponseStreamEvent, so the issue says what is wrong inside it)."""
    kind = event.get("type") if isinstance(event, dict) else None
    name = _stream_event_schemas().get(kind) if isinstance(kind, str) else None
    if name is None:
        return [FieldIssue("$.type", "an event type of ResponseStreamEvent", show(kind))]
    return openapi_issues(event, name, limit)
