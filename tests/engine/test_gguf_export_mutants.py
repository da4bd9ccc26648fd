"""engine/gguf_export.py's `export` and `main` without llama.cpp's `gguf` package (absent from the
dev venv): a recording stand-in for its writer takes every call, so each metadata value, its type,
the tensors (names, order, permuted rows) and the write sequence are checked as export makes them.
The file the real writer produces is read back in test_gguf_export.py (marker `llamacpp`)."""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from engine import gguf_export
from engine.gguf_export import gguf_name, permute_rows, read_vocab
from engine.make_tiny import TinySpec, make_tiny

# heads != kv_heads so that a q permuted by k's head count (or the reverse) shows
SPEC = TinySpec(layers=2, hidden=32, heads=4, kv_heads=2, intermediate=16, max_position_embeddings=96)


class Writer:
    """Records what export asks of gguf.GGUFWriter, in order."""

    instances: list[Writer] = []

    def __init__(self, path: str, arch: str) -> None:
        self.opened = (path, arch)
        self.calls: list[tuple[str, tuple]] = []
        self.tensors: list[tuple[str, np.ndarray]] = []
        Writer.instances.append(self)

    def add_tensor(self, name: str, data: np.ndarray) -> None:
        self.calls.append(("add_tensor", (name,)))
        self.tensors.append((name, data))

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, args))

    def values(self) -> dict[str, object]:
        """add_* -> its one argument (the metadata keys are each written once)."""
        found: dict[str, object] = {}
        for name, args in self.calls:
            if name.startswith("add_") and name != "add_tensor":
                assert name not in found, f"{name} written twice"
                (found[name],) = args
        return found


@pytest.fixture
def fake_gguf(monkeypatch: pytest.MonkeyPatch) -> type[Writer]:
    module = types.ModuleType("gguf")
    module.GGUFWriter = Writer  # type: ignore[attr-defined]
    module.LlamaFileType = types.SimpleNamespace(ALL_F32="ALL_F32")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gguf", module)
    Writer.instances = []
    return Writer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("gguf_mutants") / "tiny", seed=3, spec=SPEC)


def _copy(tiny: Path, tmp_path: Path, config: dict | None = None, tok_config: dict | None = None) -> Path:
    """A copy of the tiny model whose config.json / tokenizer_config.json keys are replaced
    (a value of None deletes the key)."""
    out = tmp_path / "model"
    shutil.copytree(tiny, out)
    for name, changes in (("config.json", config), ("tokenizer_config.json", tok_config)):
        data = json.loads((out / name).read_text())
        for key, value in (changes or {}).items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        (out / name).write_text(json.dumps(data))
    return out


def _typed(values: dict[str, object]) -> dict[str, tuple[object, type]]:
    return {k: (v, type(v)) for k, v in values.items()}


def test_export_writes_the_models_metadata_and_tokenizer(tiny: Path, tmp_path: Path, fake_gguf) -> None:
    out = tmp_path / "tiny.gguf"
    assert gguf_export.export(str(tiny), str(out)) == out
    (writer,) = fake_gguf.instances
    assert writer.opened == (str(out), "llama")
    hf = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    tokens = [hf.id_to_token(i) for i in range(hf.get_vocab_size())]
    values = writer.values()
    types_ = values.pop("add_token_types")
    merges = values.pop("add_token_merges")
    chat_template = values.pop("add_chat_template")
    assert _typed(values) == _typed(
        {
            "add_name": "tiny",
            "add_file_type": "ALL_F32",
            "add_context_length": 96,
            "add_embedding_length": 32,
            "add_block_count": 2,
            "add_feed_forward_length": 16,
            "add_head_count": 4,
            "add_head_count_kv": 2,
            "add_key_length": 8,
            "add_value_length": 8,
            "add_rope_dimension_count": 8,
            "add_layer_norm_rms_eps": 1e-6,
            "add_rope_freq_base": 10000.0,
            "add_vocab_size": 512,
            "add_tokenizer_model": "gpt2",
            "add_tokenizer_pre": "starcoder",
            "add_token_list": tokens,
            "add_bos_token_id": hf.token_to_id("<|endoftext|>"),
            "add_eos_token_id": hf.token_to_id("<|im_end|>"),
            "add_pad_token_id": hf.token_to_id("<|endoftext|>"),
            "add_add_bos_token": False,
            "add_add_eos_token": False,
        }
    )
    assert types_ == read_vocab(json.loads((tiny / "tokenizer.json").read_text()))[1]
    assert merges and all(isinstance(m, str) and m.count(" ") == 1 for m in merges)
    assert chat_template == json.loads((tiny / "tokenizer_config.json").read_text())["chat_template"]
    # the metadata first, then the tensors, then the file in llama.cpp's order
    names = [name for name, _ in writer.calls]
    assert names[-4:] == ["write_header_to_file", "write_kv_data_to_file", "write_tensors_to_file", "close"]
    assert names.index("add_vocab_size") < names.index("add_tensor")


def test_export_writes_every_tensor_f32_under_its_gguf_name_q_and_k_permuted(
    tiny: Path, tmp_path: Path, fake_gguf
) -> None:
    gguf_export.export(tiny, tmp_path / "tiny.gguf")
    (writer,) = fake_gguf.instances
    hf = load_file(str(tiny / "model.safetensors"))
    assert [name for name, _ in writer.tensors] == [gguf_name(n) for n in sorted(hf)]
    for (name, data), hf_name in zip(writer.tensors, sorted(hf)):
        want = hf[hf_name]
        if hf_name.endswith("q_proj.weight"):
            want = permute_rows(want, SPEC.heads)
        elif hf_name.endswith("k_proj.weight"):
            want = permute_rows(want, SPEC.kv_heads)
        assert data.dtype == np.float32 and data.flags.c_contiguous and data.shape == want.shape, name
        assert np.array_equal(data, want), name
    # the permutation changed q and k (and only those): the test would not see it otherwise
    changed = {n for (n, data), hf_name in zip(writer.tensors, sorted(hf)) if not np.array_equal(data, hf[hf_name])}
    assert changed == {f"blk.{i}.attn_{x}.weight" for i in range(2) for x in "qk"}


def test_export_defaults_and_overrides(tiny: Path, tmp_path: Path, fake_gguf) -> None:
    """Without head_dim it is hidden // heads; a head_dim in config.json wins over that; without
    rope_theta, llama's 10000; the add-BOS/EOS flags are read when present."""
    plain = _copy(
        tiny, tmp_path, {"head_dim": None, "rope_theta": None}, {"add_bos_token": None, "add_eos_token": None}
    )
    gguf_export.export(plain, tmp_path / "a.gguf")
    values = _typed(fake_gguf.instances[-1].values())
    assert values["add_key_length"] == values["add_value_length"] == values["add_rope_dimension_count"] == (8, int)
    assert values["add_rope_freq_base"] == (10000.0, float)
    assert values["add_add_bos_token"] == values["add_add_eos_token"] == (False, bool)
    (tmp_path / "model").rename(tmp_path / "plain")

    other = _copy(tiny, tmp_path, {"head_dim": 6, "rope_theta": 500.0}, {"add_bos_token": 1, "add_eos_token": "yes"})
    gguf_export.export(other, tmp_path / "b.gguf")
    values = _typed(fake_gguf.instances[-1].values())
    assert values["add_key_length"] == values["add_value_length"] == values["add_rope_dimension_count"] == (6, int)
    assert values["add_rope_freq_base"] == (500.0, float)
    assert values["add_add_bos_token"] == values["add_add_eos_token"] == (True, bool)


def test_export_refuses_a_model_that_is_not_llama(tiny: Path, tmp_path: Path, fake_gguf) -> None:
    for model_type in ("qwen2", None):
        path = _copy(tiny, tmp_path, {"model_type": model_type})
        with pytest.raises(ValueError) as caught:
            gguf_export.export(path, tmp_path / "x.gguf")
        assert str(caught.value) == f"only llama models are exported, not {model_type!r}"
        shutil.rmtree(path)
    assert fake_gguf.instances == []


def test_main_prints_the_written_path(tiny: Path, tmp_path: Path, fake_gguf, capsys) -> None:
    out = tmp_path / "m.gguf"
    gguf_export.main([str(tiny), str(out)])
    assert capsys.readouterr().out == f"{out}\n"
    assert fake_gguf.instances[0].opened == (str(out), "llama")
    with pytest.raises(SystemExit):
        gguf_export.main([str(tiny)])
    assert "usage:" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gguf_export.main(["--help"])
    assert "Write a make-tiny model directory (engine/make_tiny.py) as an F32 GGUF" in capsys.readouterr().out


def test_permute_rows_keeps_the_shape_and_pairs_each_heads_halves() -> None:
    w = np.arange(16 * 3).reshape(16, 3)  # 2 heads of 8 rows: each head's row i pairs with row i + 4
    out = permute_rows(w, 2)
    assert out.shape == (16, 3)
    assert [int(r[0]) // 3 for r in out] == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]


def test_gguf_name_maps_globals_and_layers_and_refuses_the_rest() -> None:
    assert gguf_name("model.embed_tokens.weight") == "token_embd.weight"
    assert gguf_name("model.norm.weight") == "output_norm.weight"
    assert gguf_name("lm_head.weight") == "output.weight"
    assert gguf_name("model.layers.12.mlp.down_proj.weight") == "blk.12.ffn_down.weight"
    assert gguf_name("model.layers.0.self_attn.o_proj.weight") == "blk.0.attn_output.weight"
    for bad in (
        "other.layers.0.mlp.down_proj.weight",
        "model.layers.x.mlp.down_proj.weight",
        "model.layers.0.mlp.down_proj.bias",
        "model.layers.0",
        "lm_head.bias",
    ):
        with pytest.raises(ValueError) as caught:
            gguf_name(bad)
        assert str(caught.value) == f"no GGUF name for tensor {bad!r}"


def _bpe(vocab: dict[str, int], added: list[dict], merges: list) -> dict:
    return {"model": {"type": "BPE", "vocab": vocab, "merges": merges}, "added_tokens": added}


def test_read_vocab_types_merges_and_refusals() -> None:
    tokenizer = _bpe(
        {"a": 0, "b": 1, "ab": 2},
        [
            {"id": 3, "content": "<s>", "special": True},
            {"id": 4, "content": "<t>", "special": False},
            {"id": 5, "content": "<u>"},
        ],
        ["a b", ["ab", "b"]],
    )
    assert read_vocab(tokenizer) == (["a", "b", "ab", "<s>", "<t>", "<u>"], [1, 1, 1, 3, 4, 4], ["a b", "ab b"])
    # an added token may replace a vocabulary entry's type under the same id
    assert read_vocab(_bpe({"a": 0, "b": 1}, [{"id": 1, "content": "b", "special": True}], []))[1] == [1, 3]
    assert read_vocab({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}) == (["a"], [1], [])
    for model, word in (({"type": "Unigram"}, "'Unigram'"), ({}, "None")):
        with pytest.raises(ValueError) as caught:
            read_vocab({"model": model})
        assert str(caught.value) == f"only byte-level BPE tokenizers are exported, not {word}"
    for vocab in ({"a": 0, "b": 2}, {"a": 1}):
        with pytest.raises(ValueError) as caught:
            read_vocab(_bpe(vocab, [], []))
        assert str(caught.value) == "token ids are not contiguous"
