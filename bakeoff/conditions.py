"""The conditions a candidate was measured under, recorded beside its numbers: a result
without them is not reported (bakeoff/report.py shows "conditions missing" instead).

- runtime and version as the runtime reports them (conformance/server_info.py `probe`),
  with what it says of its build, flags, KV and batching at its own paths: vLLM `/version`
  and its `/metrics` `cache_config_info`, llama.cpp `/props`, SGLang `/get_server_info`,
  TGI `/info` (long strings, such as a chat template, kept as their SHA-256);
- model and tokenizer fingerprints and the chat template's hash, from the weights'
  directory when the command launched the runtime;
- dtype and the KV/batching settings the plan gave (backend options, launch options);
- the hardware (CPU model, cores, memory) and the gateway's version and config digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

import httpx

from conformance.server_info import probe

RUNTIME_PATHS = ("/version", "/props", "/get_server_info", "/info")
LONG = 200  # characters above which a string is recorded as its digest
HASHED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
REQUIRED = ("runtime", "hardware", "gateway")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def trim_strings(value: Any) -> Any:
    """A runtime's answer with every long string replaced by its digest."""
    if isinstance(value, dict):
        return {k: trim_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trim_strings(v) for v in value[:32]]
    if isinstance(value, str) and len(value) > LONG:
        return {"sha256": sha256_text(value), "chars": len(value)}
    return value


def hardware() -> dict[str, Any]:
    cpu = platform.processor() or None
    mem_kib = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
                break
    except OSError:
        pass
    return {
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1) if mem_kib else None,
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def model_fingerprints(model_dir: Path | None) -> dict[str, Any]:
    """SHA-256 of the model's config and tokenizer files and of its weights, and the chat template's hash."""
    if model_dir is None or not model_dir.is_dir():
        return {"model_dir": None, "note": "the runtime's weights were not launched by the command: not fingerprinted"}
    files = {}
    for name in HASHED_FILES:
        p = model_dir / name
        if p.is_file():
            files[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    weights = hashlib.sha256()
    for p in sorted(model_dir.iterdir()):
        if p.suffix in WEIGHT_SUFFIXES:
            weights.update(p.name.encode())
            with p.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    weights.update(chunk)
    template = None
    tc = model_dir / "tokenizer_config.json"
    if tc.is_file():
        t = json.loads(tc.read_text()).get("chat_template")
        template = sha256_text(t if isinstance(t, str) else json.dumps(t, sort_keys=True)) if t else None
    dtype = None
    cfg = model_dir / "config.json"
    if cfg.is_file():
        dtype = json.loads(cfg.read_text()).get("torch_dtype")
    return {
        "model_dir": str(model_dir),
        "files": files,
        "weights_sha256": weights.hexdigest(),
        "tokenizer_sha256": files.get("tokenizer.json"),
        "chat_template_sha256": template,
        "config_dtype": dtype,
    }


async def runtime_answers(runtime_url: str) -> dict[str, Any]:
    """What the runtime says of itself at its own paths (absent: no JSON answer)."""
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=runtime_url.rstrip("/"), timeout=10.0) as http:
        for path in RUNTIME_PATHS:
            try:
                r = await http.get(path)
                if r.status_code == 200 and r.headers.get("content-type", "").startswith("application/json"):
                    out[path] = trim_strings(r.json())
            except (httpx.HTTPError, ValueError):
                continue
        try:
            r = await http.get("/metrics")
            info = [ln for ln in r.text.splitlines() if ln.startswith("vllm:cache_config_info")]
            if info:
                out["/metrics cache_config_info"] = info[0]
        except httpx.HTTPError:
            pass
    return out


async def record(
    *,
    gateway_url: str,
    runtime_url: str | None,
    runtime_kind: str,
    config_path: Path,
    backend: dict[str, Any],
    launch: dict[str, Any] | None,
    model_dir: Path | None,
    api_key: str | None,
) -> dict[str, Any]:
    """Every condition of one candidate (see the module's docstring)."""
    gateway = await probe(gateway_url, api_key)
    if runtime_url is not None:
        runtime = (await probe(runtime_url)).to_dict()
        answers = await runtime_answers(runtime_url)
    else:  # the native engine answers as the gateway it runs in
        runtime = {"name": "switchyard-native", "version": gateway.version, "source": "/openapi.json (in process)"}
        answers = {}
    return {
        "runtime": {"adapter": runtime_kind, **runtime, "reported": answers},
        "model": model_fingerprints(model_dir),
        "settings": {
            "backend_options": backend.get("options", {}),
            "max_inflight": backend.get("max_inflight"),
            "launch": launch,
        },
        "hardware": hardware(),
        "gateway": {
            "version": gateway.version,
            "identified_as": gateway.name,
            "config_sha256": hashlib.sha256(config_path.read_bytes()).hexdigest(),
        },
    }


def missing(conditions: dict[str, Any] | None) -> list[str]:
    """What a candidate's conditions lack before its numbers may be reported (empty: complete)."""
    if not conditions:
        return list(REQUIRED)
    gaps = [k for k in REQUIRED if not conditions.get(k)]
    if conditions.get("gateway") and not conditions["gateway"].get("version"):
        gaps.append("gateway.version")
    if conditions.get("runtime") and not conditions["runtime"].get("name"):
        gaps.append("runtime.name (the runtime did not identify itself)")
    return gaps
