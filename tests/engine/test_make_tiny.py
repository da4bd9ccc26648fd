"""make-tiny: deterministic, loadable by transformers, and the shape vLLM CPU needs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.builtin import builtin_model_dir, resolve_model_path
from engine.make_tiny import TinySpec, make_tiny

REPO = Path(__file__).resolve().parents[2]
FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tiny") / "m", seed=0)


def test_same_seed_gives_byte_identical_files(tiny: Path, tmp_path: Path) -> None:
    again = make_tiny(tmp_path / "again", seed=0)
    for name in FILES:
        assert (tiny / name).read_bytes() == (again / name).read_bytes(), name


def test_other_seed_changes_only_the_weights(tiny: Path, tmp_path: Path) -> None:
    other = make_tiny(tmp_path / "other", seed=1)
    assert (tiny / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()
    assert (tiny / "tokenizer.json").read_bytes() == (other / "tokenizer.json").read_bytes()


def test_config_has_head_dim_64_and_matches_tokenizer(tiny: Path) -> None:
    config = json.loads((tiny / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64 == config["head_dim"]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    assert tok.get_vocab_size() == config["vocab_size"] == 512
    assert config["eos_token_id"] == tok.token_to_id("<|im_end|>")
    for tag in ("<tool_call>", "</tool_call>", "<|im_start|>"):
        assert len(tok.encode(tag).ids) == 1, tag


def test_transformers_loads_model_and_tokenizer(tiny: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny))
    assert tok.eos_token == "<|im_end|>"
    ids = tok("The weather in Paris is", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
    assert logits.shape == (512,)
    # Random weights, but not degenerate: the scores spread, so greedy choices are clear.
    assert logits.std().item() > 0.5
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")


def test_spec_rejects_shapes_that_cannot_work() -> None:
    with pytest.raises(ValueError):
        TinySpec(hidden=128, heads=3)
    with pytest.raises(ValueError):
        TinySpec(heads=2, kv_heads=3)


def test_other_shapes_build(tmp_path: Path) -> None:
    out = make_tiny(tmp_path / "wide", spec=TinySpec(layers=1, hidden=256, heads=4, kv_heads=2, vocab=600,
                                                      intermediate=384))
    config = json.loads((out / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_key_value_heads"], config["vocab_size"]) == (1, 2, 600)


def test_cli_make_tiny(tmp_path: Path, tiny: Path) -> None:
    out = tmp_path / "cli"
    run = subprocess.run([sys.executable, "-m", "gateway.cli", "engine", "make-tiny", str(out), "--seed", "0"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (out / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()


def test_cli_rejects_bad_shape(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "gateway.cli", "engine", "make-tiny", str(tmp_path / "x"),
                          "--heads", "3"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "divisible" in run.stderr


def test_engine_subparsers_can_be_extended() -> None:
    import argparse

    from engine import cli

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    engine_sub = cli.engine_subparsers(sub)
    engine_sub.add_parser("serve").set_defaults(func="serve")
    cli.register(sub)  # the dispatcher registering afterwards must not add `engine` twice
    assert cli.ENGINE_SUBPARSERS is engine_sub
    assert parser.parse_args(["engine", "serve"]).func == "serve"


def test_builtin_tiny_is_built_once_into_the_cache(tmp_path: Path, tiny: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path / "cache"))
    first = builtin_model_dir("tiny")
    assert first == tmp_path / "cache" / "models" / "tiny"
    assert (first / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_path("builtin:tiny") == first
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime  # not rebuilt
    assert [p.name for p in first.parent.iterdir()] == ["tiny"]  # no temporary leftovers
    with pytest.raises(ValueError):
        builtin_model_dir("huge")


def test_builtin_rebuilds_a_stale_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path))
    stale = tmp_path / "models" / "tiny"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    built = builtin_model_dir("tiny")
    assert json.loads((built / "config.json").read_text())["model_type"] == "llama"


def test_concurrent_builds_do_not_corrupt(tmp_path: Path) -> None:
    code = "from engine.builtin import builtin_model_dir; print(builtin_model_dir('tiny'))"
    env = {"SWITCHYARD_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    target = tmp_path / "models" / "tiny"
    assert {o[0].strip() for o in outs} == {str(target)}
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["tiny"]
    from safetensors.torch import load_file

    assert "lm_head.weight" in load_file(str(target / "model.safetensors"))


def test_resolve_model_path_rejects_non_model_dirs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        resolve_model_path(str(tmp_path))
