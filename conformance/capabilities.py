"""What a target may be declared to have, so that checks which cannot apply to
it are `na` instead of false failures.

Two kinds of declaration, both made by whoever runs the suite (the CLI, or a
matrix targets file), never guessed from the server's answers:

- optional API features (`FEATURES`): a target declared with a list of
  features lacks every feature not in the list. Without a declaration every
  feature is assumed, the checks run, and a server that refuses a feature
  with a clear 400 gets a skip (which makes a MUST run incomplete).
- `SIM_FAULTS`: the server understands the simulators' `[[sim:...]]` fault
  markers. Only a simulator (directly, or a gateway model whose backend is
  one) does, so it is off unless declared.
"""

from __future__ import annotations

FEATURES: dict[str, str] = {
    "tools": "tool calling (tools, tool_choice)",
    "structured_output": "response_format json_object / json_schema (guided decoding)",
    "responses": "the Responses API (/v1/responses)",
    "embeddings": "/v1/embeddings (an embedding model)",
}
SIM_FAULTS = "sim_faults"


class UnknownCapability(ValueError):
    pass


def parse_features(values: list[str] | str) -> frozenset[str]:
    """A declared feature list (comma-separated strings or a list); unknown names
    are refused, since a typo would silently turn checks into `na`."""
    items = values.split(",") if isinstance(values, str) else [p for v in values for p in str(v).split(",")]
    chosen = frozenset(p.strip() for p in items if p.strip())
    unknown = sorted(chosen - FEATURES.keys())
    if unknown:
        raise UnknownCapability(f"unknown capability {', '.join(unknown)}; choose from {', '.join(FEATURES)}")
    return chosen


def lacking_reason(need: str) -> str:
    """Why a check needing `need` is not applicable to a target that lacks it."""
    if need == SIM_FAULTS:
        return (
            "the target is not declared a simulator (the fault checks need the simulators' [[sim:...]] markers: "
            "--sim-faults, or `simulator: true` in the matrix targets file)"
        )
    return f"the target is declared without {need} ({FEATURES[need]})"
