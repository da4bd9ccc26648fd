"""Recorded conditions: fingerprints that change with the files, long strings kept as
digests, and what counts as missing (numbers are then withheld)."""

from __future__ import annotations

import json
from pathlib import Path

from bakeoff.conditions import hardware, missing, model_fingerprints, sha256_text, trim_strings
from tests.bakeoff.report_doc import CONDITIONS


def _model(path: Path, template: str, weights: bytes) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"torch_dtype": "float32"}))
    (path / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_fingerprints_follow_the_weights_and_the_template(tmp_path: Path) -> None:
    a = model_fingerprints(_model(tmp_path / "a", "{{ messages }}", b"\x00" * 64))
    same = model_fingerprints(_model(tmp_path / "b", "{{ messages }}", b"\x00" * 64))
    other = model_fingerprints(_model(tmp_path / "c", "{{ other }}", b"\x01" * 64))
    assert a["weights_sha256"] == same["weights_sha256"] != other["weights_sha256"]
    assert a["chat_template_sha256"] == sha256_text("{{ messages }}") != other["chat_template_sha256"]
    assert a["tokenizer_sha256"] == same["tokenizer_sha256"] and a["config_dtype"] == "float32"
    assert model_fingerprints(None)["model_dir"] is None


def test_long_strings_are_kept_as_digests() -> None:
    answer = {"build_info": "b1", "chat_template": "x" * 500, "slots": [{"n_ctx": 4096}]}
    trimmed = trim_strings(answer)
    assert trimmed["build_info"] == "b1" and trimmed["slots"] == [{"n_ctx": 4096}]
    assert trimmed["chat_template"] == {"sha256": sha256_text("x" * 500), "chars": 500}


def test_what_is_missing() -> None:
    assert missing(CONDITIONS) == []
    assert missing(None) == ["runtime", "hardware", "gateway"]
    assert missing({**CONDITIONS, "hardware": {}}) == ["hardware"]
    unnamed = {**CONDITIONS, "runtime": {"adapter": "openai", "name": None}}
    assert missing(unnamed) == ["runtime.name (the runtime did not identify itself)"]
    assert missing({**CONDITIONS, "gateway": {"version": None, "config_sha256": "x"}}) == ["gateway.version"]
    assert hardware()["cores"] >= 1
