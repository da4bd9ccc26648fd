"""`--input-tokens N` means N tokens of the target's tokenizer: prompts sized
with a real simulator's /tokenize (the built-in tiny model's byte-level BPE,
where a word is up to 8 tokens) or a locally built tokenizer hit the target,
checked by counting them again independently; without either the size is
labelled an ESTIMATE; the measured mean prompt tokens are reported beside it."""

from __future__ import annotations

import argparse
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bench.benchmark import BenchOptions, build_sessions, prompt_sizer, run_once
from bench.cli import register
from bench.sizing import WORDS
from bench.token_count import detect_endpoint
from simulators.testing import start_simulator

TARGET = 48
TOLERANCE = 2  # tokens: a word boundary a tokenizer merges can leave the text one or two off


@pytest.fixture(scope="module")
def engine_sim() -> Iterator[str]:
    """The vLLM simulator counting with the built-in tiny model's tokenizer."""
    with start_simulator("vllm", source="engine", model_name="tiny-sim") as sim:
        yield sim.url


def bench_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="switchyard")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def tokenize(url: str, text: str) -> int:
    req = urllib.request.Request(
        url + "/tokenize",
        data=json.dumps({"model": "tiny-sim", "prompt": text}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["count"]


def options(url: str, out: Path, **kw) -> BenchOptions:
    return BenchOptions(
        base_url=url, model="tiny-sim", out_dir=out, rate=50.0, input_tokens=TARGET, progress=False, **kw
    )


def test_prompts_sized_with_the_simulators_tokenize_endpoint(engine_sim: str, tmp_path: Path) -> None:
    o = options(engine_sim, tmp_path, num_requests=12, output_tokens=4)
    sizer = prompt_sizer(o)
    assert sizer.method.kind == "endpoint" and engine_sim + "/tokenize" in sizer.method.description
    _, sessions = build_sessions(o, sizer)
    for s in sessions:
        turn = s.turns[0]
        counted = tokenize(engine_sim, turn.content)  # counted again, outside the harness
        assert counted == turn.tokens and abs(counted - TARGET) <= TOLERANCE, (turn.content, counted)
        assert turn.words < TARGET  # the tiny model's words are several tokens each: words would overshoot

    summary = run_once(o, o.rate, tmp_path)
    assert summary["requests"]["ok"] == 12, summary["failures"]
    assert summary["input_sizing"] == {
        "target": TARGET,
        "method": "endpoint",
        "description": sizer.method.description,
        "estimate": False,
    }
    prompt = summary["prompt_tokens"]
    assert abs(prompt["sized_mean"] - TARGET) <= TOLERANCE
    # The server's own count adds the chat template to the sized text.
    assert prompt["measured_mean"] > prompt["sized_mean"]
    text = (tmp_path / "summary.md").read_text()
    assert f"target {TARGET}, sized with the target's tokenizer" in text
    assert f"measured mean prompt_tokens {prompt['measured_mean']:.1f}" in text


def small_bpe(path: Path) -> Path:
    """A BPE tokenizer with a vocabulary too small for whole words, trained here."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = [" ".join(WORDS)] * 4 + ["request turn prefix 0 1 2 3 4 5 6 7 8 9 :"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=80, special_tokens=["[UNK]"]))
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    return path


def test_prompts_sized_with_a_named_tokenizer(upstream: str, tmp_path: Path) -> None:
    directory = small_bpe(tmp_path / "tok")
    local = Tokenizer.from_file(str(directory / "tokenizer.json"))
    o = options(upstream, tmp_path / "out", num_requests=10, output_tokens=2, tokenizer=directory, range_ratio=0.5)
    sizer = prompt_sizer(o)  # the upstream has no /tokenize: the named tokenizer counts
    assert sizer.method.kind == "tokenizer"
    _, sessions = build_sessions(o, sizer)
    sizes = [len(local.encode(s.turns[0].content).ids) for s in sessions]
    assert sizes == [s.turns[0].tokens for s in sessions]
    assert all(TARGET // 2 - TOLERANCE <= n <= TARGET * 3 // 2 + TOLERANCE for n in sizes)
    assert len(set(sizes)) > 3  # the range ratio still varies the lengths

    summary = run_once(o, o.rate, o.out_dir)
    assert summary["input_sizing"]["method"] == "tokenizer" and not summary["input_sizing"]["estimate"]
    assert "sized with the tokenizer named with --tokenizer" in (o.out_dir / "summary.md").read_text()


def test_without_a_tokenizer_the_size_is_an_estimate(upstream: str, tmp_path: Path) -> None:
    o = options(upstream, tmp_path, num_requests=6, output_tokens=2)
    summary = run_once(o, o.rate, tmp_path)
    sizing = summary["input_sizing"]
    assert sizing["estimate"] and sizing["method"] == "estimate" and "word" in sizing["description"]
    assert summary["prompt_tokens"]["sized_mean"] is None  # nothing was counted
    text = (tmp_path / "summary.md").read_text()
    assert f"target {TARGET}, an ESTIMATE: one synthetic word counted as one token" in text
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["config"]["input_sizing"]["estimate"] is True
    assert all(r["prompt_tokens_sized"] is None and r["prompt_words"] == TARGET for r in result["records"])


def test_a_tgi_style_tokenize_endpoint_is_detected() -> None:
    with start_simulator("tgi", model_name="m") as sim:
        counter = detect_endpoint(sim.url, "m")
        assert counter is not None and counter.style == "tgi"
        assert counter.count("one two three four") == 4  # the TGI simulator's synthetic tokens are words
        counter.close()


def test_a_tokenizer_that_cannot_be_read_is_a_usage_error(
    upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "run", "--base-url", upstream, "--model", "m", "--rate", "5", "--num-requests", "1"]
    code = bench_cli([*args, "--tokenizer", str(tmp_path / "missing"), "--out", str(tmp_path / "o"), "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and "--tokenizer" in err and "missing" in err and len(err.strip().splitlines()) == 1
