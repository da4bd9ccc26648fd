"""The config: every example the repository shows stays valid (README.md and docs/*.md
blocks marked as complete, every file in configs/), through the loader and through
`switchyard config check`; mistakes get messages a person can act on.

A YAML block in those documents must say what it is, on the line before its fence:
`<!-- config example: complete -->` (a whole config file, loaded here) or
`<!-- config example: fragment ... -->` (a piece of one, not loadable alone).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
import yaml

from gateway.cli.main import main as switchyard_main
from gateway.config.schema import ConfigError, load_config, parse_config
from tests.procs import SWITCHYARD

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIG_FILES = sorted((ROOT / "configs").glob("*.yaml"))

_MARK = re.compile(r"^<!-- config example: (complete|fragment)\b.*-->$")
_YAML_FENCE = re.compile(r"^```ya?ml\s*$")


@dataclass(frozen=True, slots=True)
class YamlBlock:
    source: str  # "README.md:47", the fence's line
    kind: Literal["complete", "fragment"] | None  # None: the block is not marked
    text: str


def yaml_blocks(path: Path) -> list[YamlBlock]:
    lines = path.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if not _YAML_FENCE.match(line):
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.match(previous)
        kind = mark.group(1) if mark else None
        source = f"{path.relative_to(ROOT).as_posix()}:{i + 1}"
        blocks.append(YamlBlock(source, kind, "\n".join(lines[i + 1 : end]) + "\n"))
    return blocks


ALL_BLOCKS = [b for doc in DOCUMENTS for b in yaml_blocks(doc)]
COMPLETE_EXAMPLES = [b for b in ALL_BLOCKS if b.kind == "complete"]


def readme_example() -> dict:
    """The README's complete example, the full shape of the config."""
    block = next(b for b in COMPLETE_EXAMPLES if b.source.startswith("README.md:"))
    return yaml.safe_load(block.text)


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture()
def config_check(capsys, monkeypatch):
    """`switchyard config check PATH` in this process (the command's own entry point,
    without a process start per file), free of the environment's SWITCHYARD_* overrides."""
    for name in [k for k in os.environ if k.startswith("SWITCHYARD_")]:
        monkeypatch.delenv(name)

    def run(path: Path) -> CheckOutcome:
        capsys.readouterr()
        code = switchyard_main(["config", "check", str(path)])
        out = capsys.readouterr()
        return CheckOutcome(code, out.out, out.err)

    return run


def test_every_yaml_block_in_the_docs_says_whether_it_is_a_complete_config():
    unmarked = [b.source for b in ALL_BLOCKS if b.kind is None]
    assert not unmarked, f"YAML blocks without a `<!-- config example: complete|fragment -->` line: {unmarked}"
    assert any(b.source.startswith("README.md:") for b in COMPLETE_EXAMPLES), "README.md shows no complete config"


def test_readme_example_is_the_full_shape():
    cfg = parse_config(readme_example())
    assert cfg.auth.mode == "keys"
    model = cfg.models["llama-3-8b"]
    assert model.routing == "precise"
    assert model.session_affinity.sources == ["x-session-id", "prompt_cache_key", "user"]
    assert [b.adapter for b in model.backends] == ["vllm", "sglang"]
    kv = model.backends[0].kv_events
    assert kv is not None and kv.endpoint == "tcp://vllm-a:5557" and model.backends[1].kv_events is None
    assert cfg.models["tiny"].backends[0].model_path == "builtin:tiny"


@pytest.mark.parametrize("block", COMPLETE_EXAMPLES, ids=lambda b: b.source)
def test_documented_example_is_valid(block, tmp_path, config_check):
    path = tmp_path / "example.yaml"
    path.write_text(block.text)
    load_config(path, env={})
    result = config_check(path)
    assert result.exit_code == 0 and ": OK" in result.stdout, f"{block.source}: {result.stderr}"


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_shipped_example_configs_are_valid(path, config_check):
    load_config(path, env={})
    result = config_check(path)
    assert result.exit_code == 0 and ": OK" in result.stdout, result.stderr


def test_configs_directory_is_not_empty():
    assert {p.name for p in CONFIG_FILES} >= {
        "local.yaml",
        "single-runtime.yaml",
        "mixed-fleet.yaml",
        "multi-tenant.yaml",
    }


def test_switchyard_config_check_command_names_the_mistake(tmp_path):
    data = readme_example()
    data["models"]["tiny"]["backends"][0]["wieght"] = 2
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    result = subprocess.run(
        [*SWITCHYARD, "config", "check", str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "models.tiny.backends.0.wieght" in result.stderr


def test_unknown_key_is_named():
    data = readme_example()
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
                    "m": {"fallback": ["nope"], "backends": [{"name": "a", "adapter": "openai", "url": "http://x/v1"}]}
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
    p.write_text("listen: {port: 1}\nauth: {mode: none}\n")  # a public address needs auth said
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
