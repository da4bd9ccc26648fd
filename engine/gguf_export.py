"""Write a make-tiny model directory (engine/make_tiny.py) as an F32 GGUF for llama.cpp.

The same weights and tokenizer the native engine and vLLM serve, in llama.cpp's file
format, so three implementations can be compared token for token (docs/runtimes.md,
"llama.cpp"). llama.cpp's own converter refuses a tokenizer it does not know by hash,
so the file is written directly with the `gguf` package (the copy vendored with the
llama.cpp sources the tier builds; scripts/install-llamacpp.sh):

- weights stay F32 (F16 would round them and cost parity); q and k rows are permuted
  from the HF rotary layout (halves) to llama.cpp's `llama` rope (pairs);
- the tokenizer is byte-level BPE (`gpt2`) with pre-tokenizer `starcoder`: digits one
  by one, then GPT-2's split, which is what make-tiny's HF pre-tokenizer does;
- special tokens are CONTROL, the tool-call tags USER_DEFINED (never split, but text);
  the chat template travels in `tokenizer.chat_template`.

    python -m engine.gguf_export MODEL_DIR OUT.gguf
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

# The pre-tokenizer whose split equals Digits(individual) + ByteLevel(GPT-2 regex).
PRE_TOKENIZER = "starcoder"
# llama.cpp's token types (gguf.TokenType).
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
_HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name: str) -> str:
    if hf_name in _HF_TO_GGUF:
        return _HF_TO_GGUF[hf_name]
    prefix, _, rest = hf_name.partition(".layers.")
    index, _, tail = rest.partition(".")
    if prefix != "model" or not index.isdigit() or tail not in _LAYER:
        raise ValueError(f"no GGUF name for tensor {hf_name!r}")
    return f"blk.{index}.{_LAYER[tail]}"


def permute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """HF rotary layout (each head's first half rotates with its second half) -> the
    interleaved pairs llama.cpp's `llama` rope expects (its converter's `permute`)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_vocab(tokenizer: dict[str, Any]) -> tuple[list[str], list[int], list[str]]:
    """tokenizer.json -> (tokens by id, their types, merges in rank order)."""
    model = tokenizer["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"only byte-level BPE tokenizers are exported, not {model.get('type')!r}")
    by_id: dict[int, tuple[str, int]] = {i: (tok, NORMAL) for tok, i in model["vocab"].items()}
    for added in tokenizer.get("added_tokens", []):
        by_id[int(added["id"])] = (added["content"], CONTROL if added.get("special") else USER_DEFINED)
    if sorted(by_id) != list(range(len(by_id))):
        raise ValueError("token ids are not contiguous")
    tokens = [by_id[i][0] for i in range(len(by_id))]
    types = [by_id[i][1] for i in range(len(by_id))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges


def export(model_dir: str | Path, out_path: str | Path) -> Path:
    """Write `model_dir` (a Llama HF directory of make-tiny's kind) to `out_path` as F32 GGUF."""
    import gguf  # the llama.cpp tier's copy (see the module docstring)
    from safetensors.numpy import load_file

    src, out = Path(model_dir), Path(out_path)
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    tok_config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "llama":
        raise ValueError(f"only llama models are exported, not {config.get('model_type')!r}")
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    tokens, types, merges = read_vocab(tokenizer)
    ids = {t: i for i, t in enumerate(tokens)}

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(src.name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config.get("rope_theta", 10000.0))
    writer.add_vocab_size(config["vocab_size"])

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE_TOKENIZER)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(ids[tok_config["bos_token"]])
    writer.add_eos_token_id(ids[tok_config["eos_token"]])
    writer.add_pad_token_id(ids[tok_config["pad_token"]])
    writer.add_add_bos_token(bool(tok_config.get("add_bos_token", False)))
    writer.add_add_eos_token(bool(tok_config.get("add_eos_token", False)))
    writer.add_chat_template(tok_config["chat_template"])

    for name, tensor in sorted(load_file(str(src / "model.safetensors")).items()):
        data = tensor.astype(np.float32)
        if name.endswith("self_attn.q_proj.weight"):
            data = permute_rows(data, heads)
        elif name.endswith("self_attn.k_proj.weight"):
            data = permute_rows(data, kv_heads)
        writer.add_tensor(gguf_name(name), np.ascontiguousarray(data))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("out")
    args = parser.parse_args(argv)
    print(export(args.model_dir, args.out))


if __name__ == "__main__":
    main()
