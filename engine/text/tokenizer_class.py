"""The tokenizer a checkpoint really runs under transformers (and so under vLLM), which is
not always what its `tokenizer.json` says.

transformers 5 picks a tokenizer class for a checkpoint (`AutoTokenizer`, in
`models/auto/tokenization_auto.py`) and some classes rebuild the pipeline in their
constructor, keeping only the file's vocabulary, merges, added tokens and
post-processor. For the architectures the engine serves, the choice is:

| config.json `model_type` | tokenizer_config.json `tokenizer_class` | class |
|---|---|---|
| `qwen2` | anything, or none (qwen2 is on transformers' list of checkpoints whose declared class is wrong) | `Qwen2Tokenizer` |
| `mistral` | anything, or none (no `tekken.json`: mistral-common is not used) | the file as it is |
| `llama`, or no config | `LlamaTokenizer[Fast]`, file not byte-level | `LlamaTokenizer` |
| `llama`, or no config | `Qwen2Tokenizer[Fast]` | `Qwen2Tokenizer` |
| `llama`, or no config | anything else (`PreTrainedTokenizerFast`, none, `LlamaTokenizer` over a byte-level file) | the file as it is |

What the two classes rebuild (`models/qwen2/tokenization_qwen2.py`,
`models/llama/tokenization_llama.py`):

- `Qwen2Tokenizer`: NFC normalizer; the Qwen2 split regex (digits one by one) then
  byte-level without its own regex (`add_prefix_space` from the config, default off);
  byte-level decoder; BPE without dropout, unknown token, byte fallback or
  `ignore_merges`. A Qwen2 checkpoint whose file has a plain byte-level
  pre-tokenizer therefore tokenizes "Numbers 0123" differently from the file.
- `LlamaTokenizer`: no normalizer; Metaspace without splitting, prepending "▁"
  always (`legacy: true`), to the first piece only (`legacy` false or absent), or
  never (`add_prefix_space: false`; default true); decoder Replace("▁", " "),
  ByteFallback, Fuse and, with `add_prefix_space`, one leading space stripped; BPE
  with byte fallback and fused unknowns, no unknown token.

Every class keeps the file's post-processor (what `add_special_tokens` adds): with a
`tokenizer.json` present, transformers drops tokenizer_config.json's `add_bos_token`
and `add_eos_token` before building the tokenizer (`_from_pretrained`), so they
change nothing.

Not mirrored: `fix_mistral_regex` (off unless a caller asks for it), mistral-common's
tekken tokenizers, and other model types (their file is used as it is).

Versions: this is transformers 5.20 and later (the tests compare with the installed
AutoTokenizer). 5.16-5.19, which vLLM 0.32 pins, lack one rule: a `llama` checkpoint
declaring `LlamaTokenizer` over a byte-level file gets `LlamaTokenizer`'s Metaspace
pipeline there (garbling its text; 5.20 calls that a bug and uses the file). Real
Llama 3 checkpoints declare `PreTrainedTokenizerFast` and are not affected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers

# transformers' models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX.
QWEN2_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

Pipeline = Literal["file", "qwen2", "llama"]


@dataclass(frozen=True, slots=True)
class LoadedTokenizer:
    tokenizer: Tokenizer
    spec: dict[str, Any]  # the pipeline actually used, as tokenizer.json would write it
    pipeline: Pipeline


def transformers_pipeline(model_type: str | None, declared_class: str | None, file_text: str) -> Pipeline:
    """Which pipeline AutoTokenizer ends up running (see the module's table)."""
    declared = (declared_class or "").removesuffix("Fast")
    if model_type == "qwen2":
        return "qwen2"
    if model_type not in (None, "llama"):
        return "file"
    if declared == "Qwen2Tokenizer":
        return "qwen2"
    # transformers' own test for a byte-level file, text search included.
    if declared == "LlamaTokenizer" and '"ByteLevel"' not in file_text:
        return "llama"
    return "file"


def load_tokenizer(file_text: str, tokenizer_config: dict[str, Any], model_config: dict[str, Any]) -> LoadedTokenizer:
    """`tokenizer.json`'s text, rebuilt as transformers would for this checkpoint."""
    declared = tokenizer_config.get("tokenizer_class") or model_config.get("tokenizer_class")
    pipeline = transformers_pipeline(model_config.get("model_type"), declared, file_text)
    spec = json.loads(file_text)
    if pipeline != "file":
        spec["model"] = {**spec["model"], **_BPE_OPTIONS[pipeline]}
    tok = Tokenizer.from_str(json.dumps(spec))
    if pipeline == "qwen2":
        _as_qwen2(tok, tokenizer_config)
    elif pipeline == "llama":
        _as_llama(tok, tokenizer_config)
    return LoadedTokenizer(tok, json.loads(tok.to_str()), pipeline)


# The BPE options each class's constructor passes (the file's vocabulary and merges stay).
_BPE_OPTIONS: dict[str, dict[str, Any]] = {
    "qwen2": {
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": "",
        "end_of_word_suffix": "",
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
    },
    "llama": {
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": True,
        "byte_fallback": True,
        "ignore_merges": False,
    },
}


def _as_qwen2(tok: Tokenizer, config: dict[str, Any]) -> None:
    add_prefix_space = bool(config.get("add_prefix_space") or False)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),  # not inverted
            pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()


def _as_llama(tok: Tokenizer, config: dict[str, Any]) -> None:
    add_prefix_space = config.get("add_prefix_space")
    add_prefix_space = True if add_prefix_space is None else bool(add_prefix_space)
    if not add_prefix_space:
        prepend = "never"
    else:
        prepend = "always" if config.get("legacy") else "first"
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=prepend, split=False)  # replacement "\u2581"
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_prefix_space:
        steps.append(decoders.Strip(left=1))  # one leading space
    tok.decoder = decoders.Sequence(steps)
