"""Read a Hugging Face checkpoint's safetensors files into one name -> tensor dict, on the CPU
(safetensors' default device; the model runner moves them)."""

from __future__ import annotations

import glob
import os

import torch
from safetensors.torch import load_file


def load_state_dict(model_dir: str) -> dict[str, torch.Tensor]:
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_dir}")
    state: dict[str, torch.Tensor] = {}
    for path in files:
        state.update(load_file(path))
    return state
