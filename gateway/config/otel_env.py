"""The OpenTelemetry environment (OTEL_* variables) checked as strictly as the config
file: a value the gateway would fail on, or the SDK would quietly replace by a default,
is a config error `serve` and `config check` both report (exit 2, one line), never a
traceback at start. Only the variables that apply are read (docs/operations.md, "Turning tracing on").
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

# The one OTLP encoding the `otel` extra's exporter speaks; a collector's OTLP/HTTP
# receiver listens on port 4318.
OTLP_PROTOCOL = "http/protobuf"
EXPORTERS = ("otlp", "none")
# OTEL_TRACES_SAMPLER values the SDK knows (opentelemetry.sdk.trace.sampling).
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")


def otlp_protocol(configured: str | None, env: Mapping[str, str]) -> str:
    """The OTLP protocol in force: the config's, then the traces variable, then the general one."""
    return (
        configured
        or env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or OTLP_PROTOCOL
    )


def otel_env_problem(env: Mapping[str, str], protocol: str, configured_endpoint: bool, sampler_set: bool) -> str | None:
    """What is wrong with the OTEL_* variables a gateway that traces would read (None:
    nothing). `protocol` is the one in force (`otlp_protocol`); variables the config
    overrides (`configured_endpoint`, `sampler_set`: sample_ratio) are not read."""
    if protocol != OTLP_PROTOCOL:
        source = _named(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL") or "tracing.protocol"
        return (
            f"{source} is {protocol!r}: this gateway exports OTLP over {OTLP_PROTOCOL} only (the collector's "
            f"OTLP/HTTP receiver, port 4318); set it to {OTLP_PROTOCOL} or unset it"
        )
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter and exporter not in EXPORTERS:
        return f"OTEL_TRACES_EXPORTER is {exporter!r}: this gateway exports traces over otlp (or none: off)"
    if not configured_endpoint:
        for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            value = env.get(name)
            if value and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc):
                return f"{name} is {value!r}: it must be an http:// or https:// URL, e.g. http://otel-collector:4318"
    for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        if env.get(name) and not _positive(env[name]):
            return f"{name} is {env[name]!r}: it must be a positive number of seconds"
    if not sampler_set:
        sampler = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
        if sampler and sampler not in SAMPLERS:
            return f"OTEL_TRACES_SAMPLER is {sampler!r}: one of {', '.join(SAMPLERS)}"
        arg = env.get("OTEL_TRACES_SAMPLER_ARG")
        if sampler in RATIO_SAMPLERS and arg is not None and not _ratio(arg):
            return f"OTEL_TRACES_SAMPLER_ARG is {arg!r}: {sampler} takes a ratio from 0 to 1"
    return None


def _named(env: Mapping[str, str], *names: str) -> str | None:
    return next((n for n in names if env.get(n)), None)


def _positive(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def _ratio(text: str) -> bool:
    try:
        return 0.0 <= float(text) <= 1.0
    except ValueError:
        return False
