"""The bake-off plan: one YAML file, validated strictly (a typo is an error naming its
field, as the gateway's config check does). docs/bakeoff.md describes every field.

A candidate's `backend` is written exactly as a backend in the gateway's config and is
validated by the gateway's own `BackendConfig`; with a `launch` recipe the command starts
the runtime itself and fills the backend's `url` (or, for `native`, its `model_path`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bakeoff.slo import SloSpec
from bakeoff.stages import comparable as comparable_stage
from bakeoff.stages import eliminate as eliminate_stage
from bakeoff.stages import production as production_stage
from bakeoff.stages.measure import Settings as MeasureSettings
from bakeoff.workload import WorkloadSpec
from gateway.config.schema import AdmissionConfig, BackendConfig

LaunchKind = Literal["native", "vllm_cpu", "llamacpp", "simulator"]
# What a launched runtime's backend url stands for until the command knows its port.
_LAUNCHED_URL = "http://127.0.0.1:1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Launch(_Strict):
    """How the command starts (and stops) a local runtime for a candidate.

    `native`: the gateway's own engine on `model` (`builtin:tiny` or a directory), in the
    gateway's process. `vllm_cpu` / `llamacpp`: the real servers (processes/) on `model`'s
    weights (a directory; `builtin:tiny` is built first). `simulator`: `simulator` kind
    (vllm, sglang, trtllm, tgi) with `options`, the simulator's flags with underscores
    (`prefill_ms_per_token`, `max_num_seqs`, `ttft_ms`, `itl_ms`: a modelled device).
    """

    kind: LaunchKind
    model: str = "builtin:tiny"
    simulator: Literal["vllm", "sglang", "trtllm", "tgi"] | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    ready_timeout_s: float = Field(180.0, gt=0)

    @model_validator(mode="after")
    def _kind(self) -> Launch:
        if (self.kind == "simulator") != (self.simulator is not None):
            raise ValueError("simulator: give it exactly when kind is simulator")
        return self


_ADAPTER_FOR_LAUNCH = {"native": {"native"}, "vllm_cpu": {"vllm"}, "llamacpp": {"llamacpp"}}


class Candidate(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    backend: dict[str, Any]
    launch: Launch | None = None

    @model_validator(mode="after")
    def _backend(self) -> Candidate:
        data = {"name": self.name, **self.backend}
        if self.launch is not None:
            allowed = _ADAPTER_FOR_LAUNCH.get(self.launch.kind, {self.launch.simulator})
            if data.get("adapter") not in allowed:
                raise ValueError(
                    f"backend.adapter must be {' or '.join(sorted(a or '' for a in allowed))} "
                    f"for launch kind {self.launch.kind}"
                )
            if self.launch.kind == "native":
                data.setdefault("model_path", self.launch.model)
            else:
                data.setdefault("url", _LAUNCHED_URL)
        try:
            BackendConfig.model_validate(data)
        except ValidationError as exc:
            raise ValueError("backend: " + "; ".join(_where(e) for e in exc.errors())) from None
        return self

    def backend_config(self, url: str | None = None, model_path: str | None = None) -> dict[str, Any]:
        """The backend as the gateway config gets it, with what a launch filled in."""
        data = {"name": self.name, **self.backend}
        if url is not None:
            data["url"] = url
        if model_path is not None:
            data["model_path"] = model_path
        return data


def _streaming() -> list[eliminate_stage.Feature]:
    return ["streaming"]


class Requirements(_Strict):
    """What the workload needs: the eliminate stage refuses a candidate without it
    (its `features`, `profiles` and `long_context_tokens`)."""

    features: list[eliminate_stage.Feature] = Field(default_factory=_streaming)
    conformance_profiles: list[str] = Field(default_factory=lambda: ["core"])
    min_context_tokens: int | None = Field(None, ge=1)


class Budgets(_Strict):
    """Seconds per stage, per candidate; each stage is stopped at its bound."""

    eliminate: float = Field(120.0, gt=0)
    comparable: float = Field(120.0, gt=0)
    measure: float = Field(600.0, gt=0)
    production: float = Field(180.0, gt=0)


# The eliminate settings the plan's `requirements` section gives.
REQUIREMENT_FIELDS = {"features", "profiles", "long_context_tokens"}


class Plan(_Strict):
    seed: int = 0
    budget_s: float = Field(3600.0, gt=0)  # the whole run; what is left when it runs out is reported as not run
    budgets: Budgets = Field(default_factory=Budgets)
    model: str = "bakeoff"  # the model name clients send to each candidate's gateway
    candidates: list[Candidate] = Field(min_length=1)
    # Every candidate's gateway's admission queue (README, Configuration): a small one lets
    # the production stage's overload burst overflow it. Absent: the gateway's defaults.
    admission: AdmissionConfig | None = None
    workload: WorkloadSpec
    slo: SloSpec
    requirements: Requirements = Field(default_factory=Requirements)
    eliminate: eliminate_stage.Settings = Field(default_factory=eliminate_stage.Settings)
    comparable: comparable_stage.Settings = Field(default_factory=comparable_stage.Settings)
    measure: MeasureSettings = Field(default_factory=MeasureSettings)
    production: production_stage.Settings = Field(default_factory=production_stage.Settings)

    @model_validator(mode="after")
    def _unique(self) -> Plan:
        names = [c.name for c in self.candidates]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"candidates: names must be unique ({', '.join(dup)} repeated)")
        given = sorted(REQUIREMENT_FIELDS & self.eliminate.model_fields_set)
        if given:
            raise ValueError(f"eliminate.{given[0]}: give what the workload needs under requirements")
        try:
            self.eliminate_settings()
        except ValidationError as exc:
            raise ValueError("requirements: " + "; ".join(_where(e) for e in exc.errors())) from None
        return self

    def eliminate_settings(self) -> eliminate_stage.Settings:
        """The eliminate stage's settings with the plan's requirements in them."""
        req = self.requirements
        data = {**self.eliminate.model_dump(exclude_unset=True), "features": req.features,
                "profiles": req.conformance_profiles}  # fmt: skip
        if req.min_context_tokens is not None:
            data["long_context_tokens"] = req.min_context_tokens
        return eliminate_stage.Settings.model_validate(data)


class PlanError(ValueError):
    """A plan a person must fix; one line per problem, each naming its field."""


def _where(err: Any) -> str:
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"{loc}: {str(err['msg']).removeprefix('Value error, ')}"


def parse_plan(data: Any, source: str = "plan") -> Plan:
    if not isinstance(data, dict):
        raise PlanError(f"{source}: the top level must be a mapping")
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        raise PlanError(f"{source}:\n" + "\n".join("  " + _where(e) for e in exc.errors())) from None


def load_plan(path: Path) -> Plan:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PlanError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PlanError(f"{path}: not YAML ({exc})") from None
    return parse_plan(data, str(path))
