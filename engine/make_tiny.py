"""Build a tiny random-weight Llama model directory, deterministically, in seconds.

The directory is a normal Hugging Face checkpoint (config.json, model.safetensors,
generation_config.json, tokenizer.json, tokenizer_config.json), so the same files
load in our engine, in transformers and in a real vLLM CPU build. vLLM's CPU
attention kernel rejects small head sizes, hence head_dim 64 (hidden 128, 2 heads).

Determinism: the tokenizer is trained on a fixed built-in corpus and the weights
come from a seeded torch.Generator in a fixed order, so the same arguments give
byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

# Special tokens never split and are dropped when decoding model output.
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]
# Tool-call tags are added (never split) but not special: they are part of the
# text a tool-call parser must see after detokenization.
TOOL_TAGS = ["<tool_call>", "</tool_call>", "<tools>", "</tools>", "<tool_response>", "</tool_response>"]

# Qwen2/hermes-style template: tools are listed in the system turn, the assistant
# answers with <tool_call>{"name": ..., "arguments": {...}}</tool_call>, and tool
# results come back as a user turn of <tool_response> blocks.
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system_text = messages[0]['content'] -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system_text = 'You are a helpful assistant.' -%}{%- set turns = messages -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>system\\n' + system_text -}}"
    "{%- if tools -%}"
    "{{- '\\n\\n# Tools\\n\\nYou may call functions. Their signatures are listed inside <tools></tools>:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nTo call a function, answer with one JSON object per call inside"
    ' <tool_call></tool_call> tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <arguments-object>}'
    "\\n</tool_call>' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- for message in turns -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{%- if loop.first or loop.previtem['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant' -}}"
    "{%- if message['content'] -%}{{- '\\n' + message['content'] -}}{%- endif -%}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{{- '\\n<tool_call>\\n{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' -}}"
    "{%- if fn['arguments'] is string -%}{{- fn['arguments'] or '{}' -}}"
    "{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# A small corpus: English, JSON punctuation, digits, chat markers and tool calls,
# so the trained merges cover what tests and benchmarks send.
_CORPUS_LINES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you today? I am fine, thank you.",
    "What is the weather like in Paris, London, Tokyo and New York?",
    "The weather is sunny with a temperature of 21 degrees and light wind.",
    "Please write a short story about a robot who learns to paint.",
    "Once upon a time there was a small village near the mountains.",
    "The engine schedules requests, caches prefixes and streams tokens.",
    "A gateway sends every request to the best backend and counts tokens.",
    "You are a helpful assistant. Answer the question in one sentence.",
    "Summarize the following text and list the three most important points.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2048 3.14 -7 1e-6",
    "Dates like 2024-01-31 and times like 12:30:45 appear in logs.",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"name": "search", "arguments": {"query": "paged attention", "limit": 5}}',
    '{"name": "add", "arguments": {"a": 1, "b": 2}}',
    '{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}',
    '{"city": "Berlin", "temperature": 18.5, "conditions": ["cloudy", "rain"], "ok": true, "error": null}',
    '[1, 2, 3], {"a": [true, false, null]}, {"key": "value"}',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
    '<tool_response>\n{"temperature": 25, "unit": "celsius"}\n</tool_response>',
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n"
    "<|im_start|>assistant\nHello! How can I help you?<|im_end|>",
    'def main():\n    print("hello")\n    return 0\n',
    "for i in range(10): total = total + i * 2",
    "Caf\u00e9, na\u00efve, \u00fcber, \u00e9t\u00e9, \u4f60\u597d, \u3053\u3093\u306b\u3061\u306f, \U0001f600 are non-ASCII words.",
    "Questions, answers, tools, functions, arguments, results and messages.",
    "This is a test. This is only a test. Testing one two three.",
]
CORPUS = "\n".join(_CORPUS_LINES * 4)


@dataclass(frozen=True, slots=True)
class TinySpec:
    """Shape of the tiny model. head_dim is hidden // heads and must be 64 for vLLM CPU."""

    layers: int = 2
    hidden: int = 128
    heads: int = 2
    kv_heads: int = 1
    vocab: int = 512
    intermediate: int = 256
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be divisible by kv-heads ({self.kv_heads})")
        if self.vocab < 256 + len(SPECIAL_TOKENS) + len(TOOL_TAGS):
            raise ValueError(f"vocab ({self.vocab}) must hold 256 byte tokens plus the special and tool tokens")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def train_tokenizer(vocab_size: int, corpus: Iterable[str] = (CORPUS,)) -> Tokenizer:
    """A byte-level BPE tokenizer of exactly `vocab_size` tokens, trained on `corpus`
    (the built-in one by default; a benchmark may want a wider one).

    If the corpus yields fewer merges than needed, reserved special tokens fill the
    rest, so every id the random model can sample decodes to something.
    """
    tokenizer = Tokenizer(models.BPE())
    # Digits split one by one (as Llama 3 / Qwen do) so numbers in JSON tokenize uniformly.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TAGS),
        min_frequency=2,
        show_progress=False,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TOOL_TAGS])
    reserved = [
        AddedToken(f"<|reserved_{i}|>", special=True, normalized=False)
        for i in range(vocab_size - tokenizer.get_vocab_size())
    ]
    if reserved:
        tokenizer.add_special_tokens(reserved)
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, wanted {vocab_size}")
    return tokenizer


def tokenizer_config(tokenizer: Tokenizer, max_length: int) -> dict:
    """tokenizer_config.json as transformers and vLLM read it."""
    added = {}
    for token_id, token in sorted(tokenizer.get_added_tokens_decoder().items()):
        added[str(token_id)] = {
            "content": token.content,
            "lstrip": token.lstrip,
            "normalized": token.normalized,
            "rstrip": token.rstrip,
            "single_word": token.single_word,
            "special": token.special,
        }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": PAD_TOKEN,
        "eos_token": IM_END,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "chat_template": CHAT_TEMPLATE,
    }


def random_weights(spec: TinySpec, seed: int) -> dict[str, torch.Tensor]:
    """Llama tensors under Hugging Face names, drawn in a fixed order from one seeded generator.

    Scales are chosen so logits spread over a few units (not near-uniform), which
    keeps greedy choices far from ties across implementations.
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * std).contiguous()

    h, d = spec.hidden, spec.head_dim
    tensors: dict[str, torch.Tensor] = {"model.embed_tokens.weight": normal(spec.vocab, h, std=1.0)}
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = 1.0 + normal(h, std=0.1)
        tensors[p + "self_attn.q_proj.weight"] = normal(spec.heads * d, h, std=h**-0.5)
        tensors[p + "self_attn.k_proj.weight"] = normal(spec.kv_heads * d, h, std=h**-0.5)
        tensors[p + "self_attn.v_proj.weight"] = normal(spec.kv_heads * d, h, std=h**-0.5)
        tensors[p + "self_attn.o_proj.weight"] = normal(h, spec.heads * d, std=(spec.heads * d) ** -0.5)
        tensors[p + "post_attention_layernorm.weight"] = 1.0 + normal(h, std=0.1)
        tensors[p + "mlp.gate_proj.weight"] = normal(spec.intermediate, h, std=h**-0.5)
        tensors[p + "mlp.up_proj.weight"] = normal(spec.intermediate, h, std=h**-0.5)
        tensors[p + "mlp.down_proj.weight"] = normal(h, spec.intermediate, std=spec.intermediate**-0.5)
    tensors["model.norm.weight"] = 1.0 + normal(h, std=0.1)
    tensors["lm_head.weight"] = normal(spec.vocab, h, std=0.25)
    return tensors


def model_config(spec: TinySpec, bos_id: int, eos_id: int, pad_id: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab,
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "torch_dtype": "float32",
        "use_cache": True,
    }


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def make_tiny(out_dir: str | Path, *, seed: int = 0, spec: TinySpec | None = None) -> Path:
    """Write the tiny model into `out_dir` (created if missing) and return its path."""
    spec = spec or TinySpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = train_tokenizer(spec.vocab)
    tokenizer.save(str(out / "tokenizer.json"))
    pad_id = tokenizer.token_to_id(PAD_TOKEN)
    eos_id = tokenizer.token_to_id(IM_END)
    _write_json(out / "tokenizer_config.json", tokenizer_config(tokenizer, spec.max_position_embeddings))
    _write_json(out / "special_tokens_map.json", {"bos_token": PAD_TOKEN, "eos_token": IM_END, "pad_token": PAD_TOKEN})

    _write_json(out / "config.json", model_config(spec, bos_id=pad_id, eos_id=eos_id, pad_id=pad_id))
    _write_json(
        out / "generation_config.json",
        {"bos_token_id": pad_id, "eos_token_id": [eos_id, pad_id], "pad_token_id": pad_id, "do_sample": False},
    )
    save_file(random_weights(spec, seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
