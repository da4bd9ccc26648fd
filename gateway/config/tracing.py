"""The `tracing:` section of the config and the OpenTelemetry environment it is
read with: which settings a gateway exports its traces under (gateway/observe/tracing.py).
The variables are checked as strictly as the file (gateway/config/otel_env.py).

Each setting left out of the config falls back to the standard OTEL_* variable,
and then to a default, so that a platform that already sets OTEL_EXPORTER_OTLP_ENDPOINT
and OTEL_SERVICE_NAME on every pod turns tracing on without a config change. No
OpenTelemetry import here: a gateway without the `otel` extra reads this too.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.config.otel_env import otel_env_problem, otlp_protocol
from gateway.config.section import secret_field
from processes.install import install_hint

TRACES_PATH = "/v1/traces"
DEFAULT_SERVICE_NAME = "switchyard"
MISSING_EXTRA = f"tracing needs the otel extra ({install_hint('otel')}): opentelemetry-sdk is not installed"


class TracingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # None: on when the environment names an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT
    # or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_TRACES_EXPORTER is not "none".
    # OTEL_SDK_DISABLED=true turns tracing off whatever this says.
    enabled: bool | None = None
    # The collector's OTLP/HTTP address, e.g. http://otel-collector:4318 (/v1/traces is
    # added unless the path already ends with it). None: the OTEL_* variables, then localhost.
    endpoint: str | None = None
    protocol: Literal["http/protobuf"] | None = None
    # The share of new traces kept (a trace a client started keeps its own decision).
    # None: OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, by default every trace.
    sample_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    service_name: str | None = None  # None: OTEL_SERVICE_NAME, then "switchyard"
    # Sent with each export (a collector's credentials: a secret, never shown); None: OTEL_EXPORTER_OTLP_HEADERS.
    headers: dict[str, str] | None = secret_field()

    @model_validator(mode="after")
    def _installed(self) -> TracingConfig:
        if self.enabled and not otel_installed():
            raise ValueError(MISSING_EXTRA)
        return self


def otel_installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except ImportError:  # opentelemetry itself missing
        return False


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """The config and the environment resolved: what the exporter is built with.
    None in `endpoint` and `headers` leaves them to the exporter's own reading of the
    environment; None in `sample_ratio` leaves the sampler to OTEL_TRACES_SAMPLER."""

    enabled: bool
    endpoint: str | None
    sample_ratio: float | None
    service_name: str | None
    headers: Mapping[str, str] | None
    problem: str | None  # why these settings cannot be served (None: they can)


def resolve(config: TracingConfig, env: Mapping[str, str]) -> TracingSettings:
    endpoint_env = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    # OTEL_SDK_DISABLED is the SDK's own off switch: it wins over the config too.
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        enabled = False
    elif config.enabled is not None:
        enabled = config.enabled
    else:
        no_exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none"
        enabled = bool(endpoint_env) and not no_exporter
    problem = None
    if enabled:
        protocol = otlp_protocol(config.protocol, env)
        problem = otel_env_problem(env, protocol, config.endpoint is not None, config.sample_ratio is not None)
        if problem is not None:
            problem = f"tracing: {problem}"
        elif not otel_installed():
            problem = MISSING_EXTRA
    # None: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, by default http://localhost:4318.
    endpoint = None if config.endpoint is None else traces_url(config.endpoint)
    service_name = config.service_name
    if (
        service_name is None
        and not env.get("OTEL_SERVICE_NAME")
        and "service.name=" not in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    ):
        service_name = DEFAULT_SERVICE_NAME
    return TracingSettings(enabled, endpoint, config.sample_ratio, service_name, config.headers, problem)


def traces_url(endpoint: str) -> str:
    """The collector's base address as the traces URL (OTEL_EXPORTER_OTLP_ENDPOINT's rule)."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH
