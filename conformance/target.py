"""Who is being judged: a base URL, a model, credentials, and the optional
gateway knowledge that the `gateway` profile needs (a key without access, a
rate-limited key, an overloadable model)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from conformance.capabilities import SIM_FAULTS


def normalize_base_url(url: str) -> str:
    """Accept `http://host:port` or `http://host:port/v1` (what the official
    client wants) and return the latter, without a trailing slash."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


@dataclass(slots=True)
class Target:
    base_url: str
    model: str
    name: str = ""  # a label for reports, e.g. "gateway/vllm" or "vllm (direct)"
    api_key: str | None = None
    bad_api_key: str | None = None
    forbidden_model: str | None = None  # a model this api_key may not use (answered as missing: 404)
    rate_limited_key: str | None = None  # a key whose tenant has a small requests-per-minute limit (429)
    overload_model: str | None = None  # a model whose queue is small enough to overflow (503)
    metrics_url: str | None = None  # Prometheus text endpoint to watch running requests after a cancel
    runtime: str | None = (
        None  # for direct runs: the runtime kind (vllm, sglang, ...), to look up its expected deviations
    )
    sim_faults: bool = False  # the server understands the simulators' [[sim:...]] fault markers
    # Declared optional features (conformance/capabilities.py); None: not declared, every feature assumed.
    capabilities: frozenset[str] | None = None
    timeout_s: float = 60.0
    extra_headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base_url = normalize_base_url(self.base_url)
        if not self.name:
            self.name = self.base_url

    def lacks(self, need: str) -> bool:
        """Whether the target is declared without `need` (a feature, or SIM_FAULTS)."""
        if need == SIM_FAULTS:
            return not self.sim_faults
        return self.capabilities is not None and need not in self.capabilities

    def describe(self) -> dict[str, Any]:
        """For reports: everything except secrets."""
        d = asdict(self)
        for key in ("api_key", "bad_api_key", "rate_limited_key"):
            d[key] = "<set>" if d[key] else None
        d["capabilities"] = sorted(self.capabilities) if self.capabilities is not None else None
        return d
