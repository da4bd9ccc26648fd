"""Which server a report judged: its name and version, as the server itself reports them.

Each runtime names its version at its own path, at the server's root (not under /v1):

| server | path | what it answers |
|---|---|---|
| Switchyard (the gateway, native engine included) | `/openapi.json` | `info.title` "Switchyard", `info.version` |
| SGLang | `/get_server_info` | `version` |
| TGI | `/info` | `model_id`, `version` |
| llama.cpp | `/props` | `build_info` |
| vLLM, TensorRT-LLM | `/version` | `version`; which one: `owned_by` of `/v1/models` ("vllm", "tensorrt_llm") |

The first path that answers in its server's shape names it. A server that answers none is
recorded as unidentified (name and version None), never guessed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import httpx

PROBE_TIMEOUT_S = 10.0
OWNERS = {"vllm": "vllm", "tensorrt_llm": "trtllm"}  # /v1/models owned_by -> runtime name


@dataclass(slots=True, frozen=True)
class ServerInfo:
    name: str | None  # switchyard, vllm, sglang, tgi, llama.cpp, trtllm; None: unidentified
    version: str | None
    source: str | None  # the path that answered

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def label(self) -> str:
        return f"{self.name} {self.version or '(no version)'}" if self.name else "unidentified"


UNIDENTIFIED = ServerInfo(None, None, None)


def server_info_from(d: Any) -> ServerInfo:
    """A report's `server` entry back (absent in reports written before it existed)."""
    if not isinstance(d, dict):
        return UNIDENTIFIED
    return ServerInfo(d.get("name"), d.get("version"), d.get("source"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def identify(answers: dict[str, Any]) -> ServerInfo:
    """Decide from the JSON each path answered (absent: no JSON object answer)."""
    info = answers.get("/openapi.json", {}).get("info")
    if isinstance(info, dict) and info.get("title") == "Switchyard":
        return ServerInfo("switchyard", _text(info.get("version")), "/openapi.json")
    sglang = answers.get("/get_server_info")
    if sglang is not None and _text(sglang.get("version")):
        return ServerInfo("sglang", sglang["version"], "/get_server_info")
    tgi = answers.get("/info")
    if tgi is not None and "model_id" in tgi and _text(tgi.get("version")):
        return ServerInfo("tgi", tgi["version"], "/info")
    props = answers.get("/props")
    if props is not None and _text(props.get("build_info")):
        return ServerInfo("llama.cpp", props["build_info"], "/props")
    version = answers.get("/version")
    if version is not None and _text(version.get("version")):
        models = answers.get("/v1/models", {}).get("data")
        owners = {m.get("owned_by") for m in models if isinstance(m, dict)} if isinstance(models, list) else set()
        names = {OWNERS[o] for o in owners if o in OWNERS}
        return ServerInfo(names.pop() if len(names) == 1 else None, version["version"], "/version")
    return UNIDENTIFIED


PATHS = ("/openapi.json", "/get_server_info", "/info", "/props", "/version", "/v1/models")


async def probe(base_url: str, api_key: str | None = None, extra_headers: dict[str, str] | None = None) -> ServerInfo:
    """Ask the server at `base_url` (with or without /v1) who it is; never raises."""
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = dict(extra_headers or {})
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    answers: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=root, headers=headers, timeout=PROBE_TIMEOUT_S) as client:
        for path in PATHS:
            try:
                r = await client.get(path)
                body = r.json() if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                continue
            if isinstance(body, dict):
                answers[path] = body
    return identify(answers)
