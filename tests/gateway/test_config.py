"""The config: DESIGN.md's example stays valid; mistakes get messages a person can act on."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from gateway.config import ConfigError, load_config, parse_config

DESIGN = Path(__file__).resolve().parents[3] / "shared" / "DESIGN.md"
ROOT = Path(__file__).resolve().parents[2]


def design_example() -> dict:
    text = DESIGN.read_text()
    block = re.search(r"## The config's shape.*?```yaml\n(.*?)```", text, re.S).group(1)
    # The example's key digest is a placeholder; fill it with a real digest.
    block = block.replace("<hex digest of the key>", hashlib.sha256(b"sk-example").hexdigest())
    return yaml.safe_load(block)


def test_design_example_is_valid():
    cfg = parse_config(design_example())
    assert cfg.auth.mode == "keys"
    assert cfg.models["llama-3-8b"].routing == "prefix_affinity"
    assert [b.adapter for b in cfg.models["llama-3-8b"].backends] == ["vllm", "sglang"]
    assert cfg.models["tiny"].backends[0].model_path == "builtin:tiny"


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_example_configs_are_valid(path):
    load_config(path, env={})


def test_unknown_key_is_named():
    data = design_example()
    data["models"]["tiny"]["backends"][0]["wieght"] = 2
    with pytest.raises(ConfigError, match=r"models\.tiny\.backends\.0\.wieght"):
        parse_config(data)


def test_backend_without_url_and_bad_fallback():
    with pytest.raises(ConfigError, match="needs url"):
        parse_config({"models": {"m": {"backends": [{"name": "a", "adapter": "vllm"}]}}})
    with pytest.raises(ConfigError, match="fallback names 'nope'"):
        parse_config(
            {
                "models": {
                    "m": {"fallback": ["nope"], "backends": [{"name": "a", "adapter": "openai", "url": "http://x"}]}
                }
            }
        )


def test_bad_key_digest_and_jwt_without_keys():
    with pytest.raises(ConfigError, match="SHA-256"):
        parse_config({"auth": {"mode": "keys", "api_keys": [{"sha256": "abc", "tenant": "t"}]}})
    with pytest.raises(ConfigError, match="needs an auth.jwt"):
        parse_config({"auth": {"mode": "jwt"}})


def test_env_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("listen: {port: 1}\n")
    cfg = load_config(
        p, env={"SWITCHYARD_PORT": "9999", "SWITCHYARD_HOST": "0.0.0.0", "SWITCHYARD_REDIS_URL": "redis://r:1/0"}
    )
    assert cfg.listen.port == 9999 and cfg.listen.host == "0.0.0.0"
    assert cfg.quota_store.kind == "redis" and cfg.quota_store.url == "redis://r:1/0"


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", env={})
    p = tmp_path / "bad.yaml"
    p.write_text("models: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p, env={})
