"""A model directory's tokenizer: `tokenizer.json` through `tokenizers`, rebuilt the way
transformers' tokenizer class for the checkpoint rebuilds it (tokenizer_class.py), plus
what `tokenizer_config.json` and `generation_config.json` say about special tokens
and the chat template.

Besides encode/decode it keeps, for every token id, the exact bytes the token
stands for, so output can be detokenized incrementally without ever cutting a
UTF-8 sequence (see detokenizer.py) and logprobs can report `bytes`.
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from engine.text.chat_template import ChatTemplateError, render_chat
from engine.text.tokenizer_class import load_tokenizer

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_METASPACE = "\u2581"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map that byte-level BPE uses."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


_UNICODE_TO_BYTE = {ch: b for b, ch in _bytes_to_unicode().items()}


def _special_token_text(value: Any) -> str | None:
    """tokenizer_config.json writes special tokens as a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _decoder_kinds(decoder: dict | None) -> set[str]:
    if not decoder:
        return set()
    if decoder.get("type") == "Sequence":
        kinds: set[str] = set()
        for step in decoder.get("decoders", []):
            kinds |= _decoder_kinds(step)
        return kinds
    return {decoder.get("type", "")}


class TextTokenizer:
    """Everything between text and token ids for one model directory."""

    def __init__(self, model_dir: str | Path) -> None:
        self.model_dir = Path(model_dir)
        tokenizer_file = self.model_dir / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise FileNotFoundError(f"{tokenizer_file} not found (only tokenizer.json tokenizers are supported)")
        self.config: dict[str, Any] = _read_json(self.model_dir / "tokenizer_config.json")
        # Not always tokenizer.json's own pipeline: the one transformers (and vLLM) runs
        # for this checkpoint (see tokenizer_class.py).
        loaded = load_tokenizer(
            tokenizer_file.read_text(encoding="utf-8"), self.config, _read_json(self.model_dir / "config.json")
        )
        self._tok: Tokenizer = loaded.tokenizer
        self._spec = loaded.spec
        self.pipeline = loaded.pipeline
        self.chat_template: str | None = self._find_chat_template()
        self.bos_token = _special_token_text(self.config.get("bos_token"))
        self.eos_token = _special_token_text(self.config.get("eos_token"))
        self.pad_token = _special_token_text(self.config.get("pad_token"))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        added = self._tok.get_added_tokens_decoder()
        # Special added tokens (<|im_end|>, <|endoftext|>) are hidden in output text;
        # non-special added tokens (<tool_call>) are ordinary text.
        self.special_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        self._added_text = {i: t.content for i, t in added.items()}

    def _find_chat_template(self) -> str | None:
        template = self.config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
            named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        if template is None:
            jinja_file = self.model_dir / "chat_template.jinja"
            if jinja_file.is_file():
                template = jinja_file.read_text(encoding="utf-8")
        return template

    # ---- ids <-> text -------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. Special-token text in `text` maps to those tokens, as in transformers.
        Through `encode_batch`, which releases the interpreter lock while it works (`encode`
        holds it throughout: a long text on a worker thread would still stop the event loop)."""
        return self._tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    @property
    def eos_token_ids(self) -> list[int]:
        """EOS ids from tokenizer_config.json and generation_config.json together."""
        ids: list[int] = []
        if self.eos_token is not None and (i := self.token_to_id(self.eos_token)) is not None:
            ids.append(i)
        gen_file = self.model_dir / "generation_config.json"
        if gen_file.is_file():
            eos = json.loads(gen_file.read_text(encoding="utf-8")).get("eos_token_id")
            for i in eos if isinstance(eos, list) else [eos]:
                if isinstance(i, int) and i not in ids:
                    ids.append(i)
        return ids

    # ---- per-token bytes ----------------------------------------------------

    @cached_property
    def _token_bytes(self) -> list[bytes]:
        kinds = _decoder_kinds(self._spec.get("decoder"))
        table: list[bytes] = []
        for token_id in range(self.vocab_size):
            if token_id in self._added_text:
                table.append(self._added_text[token_id].encode("utf-8"))
                continue
            piece = self._tok.id_to_token(token_id)
            if piece is None:
                table.append(b"")
            elif "ByteLevel" in kinds:
                table.append(
                    b"".join(
                        bytes([_UNICODE_TO_BYTE[ch]]) if ch in _UNICODE_TO_BYTE else ch.encode("utf-8") for ch in piece
                    )
                )
            elif "ByteFallback" in kinds and (m := _BYTE_FALLBACK.match(piece)):
                table.append(bytes([int(m.group(1), 16)]))
            elif "Metaspace" in kinds or "Replace" in kinds:
                table.append(piece.replace(_METASPACE, " ").encode("utf-8"))
            else:  # another decoder: the token's own decoded text is the best we know
                table.append(self._tok.decode([token_id], skip_special_tokens=False).encode("utf-8"))
        return table

    @cached_property
    def max_token_bytes(self) -> int:
        """The most bytes of text one token stands for (special tokens included): a text of
        B bytes is at least B / max_token_bytes tokens, a bound known without tokenizing."""
        return max(1, max((len(b) for b in self._token_bytes), default=1))

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token `token_id` contributes to the text (may be part of a UTF-8 character)."""
        table = self._token_bytes
        return table[token_id] if 0 <= token_id < len(table) else b""

    def token_text(self, token_id: int) -> str:
        """A printable form of one token for logprobs: its bytes as UTF-8, broken bytes replaced."""
        return self.token_bytes(token_id).decode("utf-8", errors="replace")

    # ---- chat ---------------------------------------------------------------

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        if not self.chat_template:
            raise ChatTemplateError(f"the model in {self.model_dir} has no chat template; use completions instead")
        special = {
            "bos_token": self.bos_token or "",
            "eos_token": self.eos_token or "",
            "pad_token": self.pad_token or "",
        }
        return render_chat(
            self.chat_template,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            special_tokens=special,
            **kwargs,
        )
