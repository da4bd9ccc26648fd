"""The gateway's config: one YAML file, validated by pydantic.

The shape is the example in README.md ("Configuration"), which tests/gateway/config/test_config.py
loads with every file in configs/; platform teams swap a runtime by changing one backend's
`adapter` and `url`. Environment overrides: SWITCHYARD_HOST, SWITCHYARD_PORT,
SWITCHYARD_REDIS_URL, SWITCHYARD_AUTH_MODE, SWITCHYARD_LOG_LEVEL.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from engine.builtin import model_path_problem
from gateway.config.auth import AuthConfig
from gateway.config.exposure import ListenConfig, OpsConfig, open_auth_problem, ops_exposure_refusal
from gateway.config.lifecycle import AdminConfig, DrainConfig, ReloadConfig
from gateway.config.redis import RedisDeploymentConfig
from gateway.config.response_store import ResponseStoreConfig
from gateway.config.rollout import RolloutConfig, rollout_problem
from gateway.config.section import StrictSection as _Strict
from gateway.config.tracing import TracingConfig
from policies.ejection import EjectionConfig
from policies.kv_index import KVIndexSettings
from policies.profiles import Routing
from policies.redact import redact_text
from policies.rollout_records import Track
from policies.saturation import SaturationDetector
from policies.session import SessionAffinity
from processes.install import install_hint

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's
REDIS_SCHEMES = ("redis", "rediss", "unix")  # what redis-py's from_url accepts


class QuotaStoreConfig(RedisDeploymentConfig):
    """`kind: redis` shares the limits through the Redis deployment that the
    fields of gateway/config/redis.py describe (`mode`: single, cluster, sentinel)."""

    kind: Literal["memory", "redis"] = "memory"
    url: str = "redis://127.0.0.1:6379/0"
    on_unavailable: Literal["fail_open", "fail_closed"] = "fail_open"
    key_prefix: str = "switchyard"
    lease_ttl_s: float = Field(30.0, gt=0)
    timeout_s: float = Field(1.0, gt=0)  # each wait of a call (a connection, the answer) before the fail policy

    @model_validator(mode="after")
    def _redis_url(self) -> QuotaStoreConfig:
        if self.kind == "redis" and urlsplit(self.url).scheme not in REDIS_SCHEMES:
            raise ValueError(f"url {self.url!r} must start with redis://, rediss:// or unix://")
        return self


class TenantConfig(_Strict):
    requests_per_minute: int | None = Field(None, ge=0)
    tokens_per_minute: int | None = Field(None, ge=0)
    max_concurrent: int | None = Field(None, ge=0)
    tier: int = 1
    models: list[str] = Field(default_factory=lambda: ["*"])
    max_tokens_cap: int | None = Field(None, ge=1)  # reservation when a request sends no max_tokens


class AdmissionConfig(_Strict):
    max_queue: int = Field(256, ge=0)
    max_queue_wait_s: float = Field(30.0, gt=0)
    full_status: Literal[429, 503] = 429


class KVEventsConfig(KVIndexSettings):
    """A backend's KV-cache events, for precise prefix routing (adapters/kv_events.py): the
    index's settings (policies/kv_index.py) and where the runtime publishes them (vLLM's and
    SGLang's `--kv-events-config`; the native engine publishes in process)."""

    endpoint: str | None = None  # the runtime's ZMQ PUB socket, e.g. tcp://10.0.0.5:5557
    replay_endpoint: str | None = None  # its ROUTER replay socket, if configured
    topic: str = ""
    hash: Literal["sha256", "sha256_cbor"] = "sha256"  # vLLM's --prefix-caching-hash-algo
    hash_seed: str | None = None  # the runtime's PYTHONHASHSEED, when it sets one (vLLM)


class BackendConfig(_Strict):
    name: str
    adapter: Literal["openai", "vllm", "sglang", "trtllm", "tgi", "llamacpp", "native"]
    url: str | None = None
    served_model: str | None = None
    model_path: str | None = None  # native engine: a HF directory or "builtin:tiny"
    weight: float = Field(1.0, gt=0)
    max_inflight: int | None = Field(None, ge=1)  # generations (choices) open to it at once
    # Upstream waits, each bounded on its own (docs/adapters.md, "Timeouts").
    timeout_s: float = Field(300.0, gt=0)  # a non-streamed answer, start to end
    connect_timeout_s: float = Field(5.0, gt=0)
    first_byte_timeout_s: float = Field(60.0, gt=0)  # a streamed answer's first byte (queue + prefill)
    stream_idle_timeout_s: float = Field(30.0, gt=0)  # silence between two chunks of a streamed answer
    pool_wait_s: float = Field(5.0, gt=0)  # for a free connection when all max_connections are in use
    max_connections: int = Field(256, ge=1)
    options: dict[str, Any] = Field(default_factory=dict)  # adapter-specific knobs
    kv_events: KVEventsConfig | None = None
    # Which group of the model's backends it serves in a rollout (gateway/config/rollout.py).
    track: Track = "stable"

    @model_validator(mode="after")
    def _where(self) -> BackendConfig:
        if self.adapter == "native":
            if not self.model_path:
                raise ValueError(
                    f"backend {self.name!r}: adapter native needs model_path (a directory or builtin:tiny)"
                )
            problem = native_problem(self.model_path)
        elif not self.url:
            raise ValueError(f"backend {self.name!r}: adapter {self.adapter} needs url")
        else:
            problem = backend_url_problem(self.adapter, self.url)
        if problem is not None:
            raise ValueError(f"backend {self.name!r}: {problem}")
        if self.kv_events is not None:
            if self.adapter in ("vllm", "sglang") and not self.kv_events.endpoint:
                raise ValueError(f"backend {self.name!r}: kv_events needs the endpoint {self.adapter} publishes on")
            if self.adapter == "native" and self.kv_events.endpoint:
                raise ValueError(f"backend {self.name!r}: the native engine publishes its events in process")
            if self.adapter not in ("vllm", "sglang", "native"):
                raise ValueError(f"backend {self.name!r}: adapter {self.adapter} has no KV events to read")
        return self


def backend_url_problem(adapter: str, url: str) -> str | None:
    """What is wrong with a backend's url for its adapter (None: nothing). `openai`
    takes the API base (the path its /chat/completions hangs under, e.g. .../v1);
    the runtime adapters take the server root and add /v1 themselves."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"url {url!r} must start with http:// or https:// and name a host"
    try:
        port = parts.port
    except ValueError:
        return f"url {url!r} has no valid port"
    if not parts.hostname or port == 0:
        return f"url {url!r} must name a host (and a port from 1 to 65535, if any)"
    if parts.query or parts.fragment:
        return f"url {url!r} must not carry a query or fragment"
    root = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if adapter == "openai" and not path:
        return f"adapter openai takes the API base, not the server root: {root}/v1 for most servers"
    if adapter != "openai" and path.endswith("/v1"):
        return f"adapter {adapter} takes the server root and adds /v1 itself: {root}{path[: -len('/v1')]}"
    return None


def native_problem(model_path: str) -> str | None:
    """What stops the native engine from serving `model_path` here (None: nothing)."""
    try:
        has_torch = importlib.util.find_spec("torch") is not None
    except ImportError:  # an import hook refusing it says the same
        has_torch = False
    if not has_torch:
        return f"adapter native needs the engine extra ({install_hint('engine')}): torch is not installed"
    problem = model_path_problem(model_path)
    return None if problem is None else f"model_path {problem}"


class ModelConfig(_Strict):
    # A profile's name (policies/profiles.py: the plain policies, `blended`, `precise`) or a profile.
    routing: Routing = "round_robin"
    fallback: list[str] = Field(default_factory=list)
    backends: list[BackendConfig] = Field(min_length=1)
    owned_by: str = "switchyard"
    max_retries: int = Field(1, ge=0)  # extra rounds over the backends when all failed before the first byte
    retry_backoff_s: float = Field(0.05, ge=0)  # before round k: retry_backoff_s * 2**(k-1)
    # A sampling parameter a backend's runtime rejects (docs/adapters.md, "Request
    # parameters"): refuse the request (400), or drop it and name it in the
    # x-switchyard-dropped-params header and the access log. Its fallbacks' requests too.
    unsupported_params: Literal["reject", "drop"] = "reject"
    # A top-level request field OpenAI's API does not define, on chat, completions and
    # the Responses API alike: let it pass (chat and completions hand it to the runtime,
    # e.g. vLLM's `chat_template_kwargs`; the Responses API ignores it), or refuse it
    # (400 `unknown_parameter`). gateway/openai/request_fields.py `refuse_unknown`.
    unknown_params: Literal["pass", "reject"] = "pass"
    # The policies' own settings (policies/saturation.py, session.py, ejection.py).
    saturation: SaturationDetector = Field(default_factory=SaturationDetector)
    session_affinity: SessionAffinity = Field(default_factory=SessionAffinity)
    prefix_index_blocks: int = Field(65536, ge=1)  # per backend: the approximate prefix index's bound
    ejection: EjectionConfig = Field(default_factory=EjectionConfig)
    # A rollout of the backends on the candidate track (gateway/config/rollout.py).
    rollout: RolloutConfig | None = None


class LimitsConfig(_Strict):
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # Upstream generations one request may start: prompts x n (400 above it).
    max_choices_per_request: int = Field(128, ge=1)
    # Checked by the HTTP protocol itself (gateway/http/limits.py), before any other work:
    # a request head (request line and headers) over the size or count is answered 431,
    # one not complete in time 408; an idle keep-alive connection is closed.
    max_head_bytes: int = Field(64 * 1024, ge=1024)
    max_headers: int = Field(100, ge=8)
    head_timeout_s: float = Field(10.0, gt=0)
    keepalive_timeout_s: float = Field(30.0, gt=0)
    # Requests pipelined on one connection beyond this are not read: the connection
    # closes after answering them.
    max_pipelined: int = Field(16, ge=1)
    # JSON nesting a request body may use (gateway/openai/requests.py says why 64); at most 200,
    # well inside what the JSON encoder can write back.
    max_json_depth: int = Field(64, ge=8, le=200)
    # The longest deadline a client's timeout header (x-request-timeout, the OpenAI SDKs')
    # may set; a longer one is clamped to it (gateway/http/deadline.py). 600 s is the
    # OpenAI SDKs' default timeout, which they send on every request.
    max_request_timeout_s: float = Field(600.0, gt=0)


class GatewayConfig(_Strict):
    listen: ListenConfig = Field(default_factory=ListenConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    quota_store: QuotaStoreConfig = Field(default_factory=QuotaStoreConfig)
    response_store: ResponseStoreConfig = Field(default_factory=ResponseStoreConfig)  # the Responses API's
    tenants: dict[str, TenantConfig] = Field(default_factory=dict)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    ops: OpsConfig = Field(default_factory=OpsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)  # gateway/config/tracing.py
    admin: AdminConfig = Field(default_factory=AdminConfig)
    drain: DrainConfig = Field(default_factory=DrainConfig)
    reload: ReloadConfig = Field(default_factory=ReloadConfig)
    # Worker processes on the one port (`serve --workers` overrides it); docs/operations.md, "Workers".
    workers: int = Field(1, ge=1, le=64)
    access_log: bool = True
    log_level: str = "info"

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        if v.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return v

    @model_validator(mode="after")
    def _servable(self) -> GatewayConfig:
        problem = open_auth_problem(self.auth, self.listen)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _cross_refs(self) -> GatewayConfig:
        names: dict[str, str] = {}
        for model_name, model in self.models.items():
            problem = rollout_problem(model_name, model.rollout, [(b.name, b.track) for b in model.backends])
            if problem is not None:
                raise ValueError(problem)
            for fb in model.fallback:
                if fb not in self.models:
                    raise ValueError(f"models.{model_name}.fallback names {fb!r}, which is not a configured model")
                if fb == model_name:
                    raise ValueError(f"models.{model_name}.fallback names itself")
            for b in model.backends:
                if b.name in names and names[b.name] != model_name:
                    continue  # the same backend may serve several model names
                names[b.name] = model_name
        for key in self.auth.api_keys:
            if self.tenants and key.tenant not in self.tenants:
                raise ValueError(f"auth.api_keys: tenant {key.tenant!r} is not in tenants")
        refusal = ops_exposure_refusal(self.ops, self.listen, self.auth.mode)
        if refusal:
            raise ValueError(refusal)
        return self

    @model_validator(mode="after")
    def _one_request_cannot_fill_a_pool(self) -> GatewayConfig:
        cap = self.limits.max_choices_per_request
        for model_name, model in self.models.items():
            for b in model.backends:
                if b.adapter != "native" and cap >= b.max_connections:
                    raise ValueError(
                        f"limits.max_choices_per_request ({cap}) must be below models.{model_name} backend "
                        f"{b.name!r} max_connections ({b.max_connections}): one request could hold every connection"
                    )
        return self


class ConfigError(Exception):
    """A config a person must fix; the message says where and what, with every
    secret in it masked (policies/redact.py): it is printed by `config check` and
    `serve`, logged and answered by a reload."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_text(message))


def _format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"  {where}: {msg}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "config") -> GatewayConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, not {type(data).__name__}")
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source} is not valid:\n{_format_validation_error(exc)}") from None


def load_config(path: str | os.PathLike[str] | None, env: dict[str, str] | None = None) -> GatewayConfig:
    """Read and validate a config file, then apply environment overrides."""
    env = dict(os.environ) if env is None else env
    data: Any = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config {p}: {exc.strerror}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p} is not valid YAML: {exc}") from None
    # An empty file (or one of comments only) is YAML's null: the empty config, which the
    # environment's overrides apply to as to no file at all.
    data = apply_env_overrides({} if data is None else data, env)
    return parse_config(data, str(path) if path else "config")


def with_listen(config: GatewayConfig, host: str | None, port: int | None, workers: int | None = None) -> GatewayConfig:
    """`config` listening where the command line says (None: as configured), with its
    worker count, validated again: moving a no-auth config off loopback must fail
    here, not at start."""
    if not host and port is None and workers is None:
        return config
    data = config.model_dump(exclude_unset=True)
    listen = dict(data.get("listen") or {})
    if host:
        listen["host"] = host
    if port is not None:
        listen["port"] = port
    data["listen"] = listen
    if workers is not None:
        data["workers"] = workers
    return parse_config(data, "the command line")


def apply_env_overrides(data: Any, env: dict[str, str]) -> Any:
    if not isinstance(data, dict):
        return data
    data = dict(data)
    listen = dict(data.get("listen") or {})
    if "SWITCHYARD_HOST" in env:
        listen["host"] = env["SWITCHYARD_HOST"]
    if "SWITCHYARD_PORT" in env:
        listen["port"] = env["SWITCHYARD_PORT"]
    if listen:
        data["listen"] = listen
    if "SWITCHYARD_REDIS_URL" in env:
        store = dict(data.get("quota_store") or {})
        store["url"] = env["SWITCHYARD_REDIS_URL"]
        store.setdefault("kind", "redis")
        data["quota_store"] = store
    if "SWITCHYARD_AUTH_MODE" in env:
        auth = dict(data.get("auth") or {})
        auth["mode"] = env["SWITCHYARD_AUTH_MODE"]
        data["auth"] = auth
    if "SWITCHYARD_LOG_LEVEL" in env:
        data["log_level"] = env["SWITCHYARD_LOG_LEVEL"]
    return data
