"""make-tiny: deterministic, loadable by transformers, and the shape vLLM CPU needs."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from adapters.base import GenerationRequest, LogprobsDelta, SamplingParams, TextDelta, Usage
from adapters.native import NativeAdapter
from engine.builtin import builtin_model_dir, resolve_model_path
from engine.make_tiny import TinySpec, make_tiny
from processes import HERMES_TOOLS, VLLM_CPU_ENV, VLLM_PYTHON, Child, free_port, http_probe, vllm_server_argv

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
    out = make_tiny(
        tmp_path / "wide", spec=TinySpec(layers=1, hidden=256, heads=4, kv_heads=2, vocab=600, intermediate=384)
    )
    config = json.loads((out / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_key_value_heads"], config["vocab_size"]) == (1, 2, 600)


def test_cli_make_tiny(tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture) -> None:
    from gateway.cli.main import main

    out = tmp_path / "cli"
    assert main(["engine", "make-tiny", str(out), "--seed", "0"]) == 0
    assert (out / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()
    assert "head_dim=64" in capsys.readouterr().out


def test_cli_rejects_bad_shape(tmp_path: Path) -> None:
    from gateway.cli.main import main

    with pytest.raises(SystemExit, match="divisible"):
        main(["engine", "make-tiny", str(tmp_path / "x"), "--heads", "3"])
    assert not (tmp_path / "x").exists()


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


def test_builtin_tiny_is_built_once_into_the_cache(tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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

    def build() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )

    with ThreadPoolExecutor(2) as pool:  # two builders at once, racing for the same cache entry
        runs = [f.result() for f in [pool.submit(build) for _ in range(2)]]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    target = tmp_path / "models" / "tiny"
    assert {r.stdout.strip() for r in runs} == {str(target)}
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["tiny"]
    from safetensors.torch import load_file

    assert "lm_head.weight" in load_file(str(target / "model.safetensors"))


def test_resolve_model_path_rejects_non_model_dirs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        resolve_model_path(str(tmp_path))


# ---- a real vLLM CPU server (the `vllm` tier: `make test-vllm` builds .venv-vllm first) --------


def _post(port: int, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    assert VLLM_PYTHON.exists(), "run scripts/install-vllm.sh (make test-vllm does) to build .venv-vllm"
    model = make_tiny(tmp_path_factory.mktemp("vllm") / "tiny")
    port = free_port()
    argv = vllm_server_argv(model, port, 1024, extra=HERMES_TOOLS)
    log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    with Child(argv, log, name="vLLM", env=VLLM_CPU_ENV, stop_timeout_s=30) as server:
        server.wait_ready(http_probe(f"http://127.0.0.1:{port}/health", timeout_s=2), timeout_s=240, interval_s=1)
        yield model, port


@pytest.mark.vllm
async def test_vllm_and_native_agree_on_greedy_tokens(vllm_server) -> None:
    model, port = vllm_server
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Caf\u00e9 weather?"}]
    theirs = _post(
        port,
        "/v1/chat/completions",
        {
            "model": "tiny",
            "messages": messages,
            "max_tokens": 32,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 1,
        },
    )
    adapter = NativeAdapter("native", str(model), engine_options={"num_blocks": 64})
    try:
        request = GenerationRequest(
            "r", "tiny", messages=messages, sampling=SamplingParams(temperature=0, max_tokens=32, logprobs=True)
        )
        events = [e async for e in adapter.generate(request)]
    finally:
        await adapter.aclose()
    ours = [lp for e in events if isinstance(e, (TextDelta, LogprobsDelta)) for lp in e.logprobs or []]
    their_lps = theirs["choices"][0]["logprobs"]["content"]
    assert [lp.logprob for lp in ours] == pytest.approx([lp["logprob"] for lp in their_lps], abs=1e-3)
    whole = [(a.token, b["token"]) for a, b in zip(ours, their_lps) if "\ufffd" not in a.token]
    assert whole and all(a == b for a, b in whole)
    usage = events[-1]
    assert isinstance(usage, Usage)
    assert usage.prompt_tokens == theirs["usage"]["prompt_tokens"]
    assert usage.completion_tokens == theirs["usage"]["completion_tokens"]
