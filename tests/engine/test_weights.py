"""engine/weights.py: a checkpoint's safetensors shards read into one name -> tensor dict."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from engine.weights import load_state_dict


def test_every_shard_is_read_into_one_dict_on_the_cpu(tmp_path):
    save_file({"a.weight": torch.ones(2, 3)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b.weight": torch.arange(4.0)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    (tmp_path / "notes.bin").write_bytes(b"not a shard")
    state = load_state_dict(str(tmp_path))
    assert sorted(state) == ["a.weight", "b.weight"]
    assert torch.equal(state["a.weight"], torch.ones(2, 3))
    assert torch.equal(state["b.weight"], torch.arange(4.0))
    assert {t.device.type for t in state.values()} == {"cpu"}


def test_shards_are_read_in_name_order_so_a_later_one_wins(tmp_path):
    save_file({"w": torch.zeros(1)}, str(tmp_path / "b.safetensors"))
    save_file({"w": torch.ones(1)}, str(tmp_path / "a.safetensors"))
    assert load_state_dict(str(tmp_path))["w"].item() == 0.0


def test_a_directory_without_shards_is_refused_naming_it(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError) as err:
        load_state_dict(str(tmp_path))
    assert str(err.value) == f"no *.safetensors files in {tmp_path}"
