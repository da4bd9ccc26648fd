"""The runtime-neutral view of one generation request inside a simulator.

Each runtime module validates the body its own way (that is where the runtimes
differ), then builds a `SimRequest` so the token sources and the recorder see one
shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulators.faults import NO_FAULTS, Faults
from simulators.structured import Constraint


@dataclass(slots=True)
class SimRequest:
    request_id: str
    kind: str  # "chat" | "completion" | "generate"
    prompt_words: list[str]  # the prompt as the synthetic tokenizer sees it (see prompt_words_*)
    prompt_text: str  # the text a real model would see, for the engine source
    max_tokens: int | None = None
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    n: int = 1
    temperature: float | None = None
    messages: list[dict[str, Any]] | None = None
    faults: Faults = NO_FAULTS
    constraint: Constraint | None = None  # guided decoding: what the output must be
    # A completions request with several prompts: each prompt's tokens. Its choices are
    # prompt-major (`n` per prompt) and `prompt_words` holds the longest prompt.
    prompt_counts: list[int] = field(default_factory=list)
    generation: Any = None  # the running Generation, once started
    # The (longest) prompt's token ids when the client sent ids (completions), else None.
    prompt_ids: list[int] | None = None
    reply: Any = None  # the runtime's Reply answering it, where a runtime sets it
    # Legacy completions' `echo`: each prompt's text, put before its choices' text.
    echo_texts: list[str] = field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        """The prompt tokens usage reports: every prompt of a batch once."""
        if self.faults.prompt_tokens is not None:
            return self.faults.prompt_tokens
        counted = sum(self.prompt_counts) if len(self.prompt_counts) > 1 else len(self.prompt_words)
        scale = self.faults.prompt_tokens_scale
        return counted if scale is None else round(counted * scale)

    @property
    def context_tokens(self) -> int:
        """The tokens the context checks measure: the (longest) prompt."""
        if self.faults.prompt_tokens is not None:
            return self.faults.prompt_tokens
        return len(self.prompt_words)

    def completion_text(self, index: int, generated: str) -> str:
        """Choice `index`'s whole text: with `echo`, its prompt first (choices are
        prompt-major, `n` per prompt), as the runtimes answer it."""
        if not self.echo_texts:
            return generated
        per_prompt = max(1, self.n // len(self.echo_texts))
        return self.echo_texts[min(index // per_prompt, len(self.echo_texts) - 1)] + generated

    def prompt_tokens_of(self, index: int) -> int:
        """The prompt tokens behind choice `index`."""
        if len(self.prompt_counts) > 1 and self.faults.prompt_tokens is None:
            return self.prompt_counts[index // max(1, self.n // len(self.prompt_counts))]
        return self.prompt_tokens


def content_text(content: Any) -> str:
    """A message's `content` as plain text: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prompt_words_chat(messages: list[dict[str, Any]]) -> list[str]:
    """The synthetic tokenizer's rule for chat: one token per message for its role
    marker, one per whitespace-separated word of its text, and one for the
    generation prompt. Deterministic and cheap, so tests can size prompts exactly."""
    words: list[str] = []
    for message in messages:
        words.append(f"<{message.get('role', '')}>")
        words.extend(content_text(message.get("content")).split())
    words.append("<assistant>")
    return words


def with_default_system(messages: Any, system: str | None) -> Any:
    """A chat as a template with a default system message renders it (Qwen2.5's adds
    one when the chat has none); unchanged without `system` or with a system message."""
    if not system or not isinstance(messages, list):
        return messages
    if any(isinstance(m, dict) and m.get("role") == "system" for m in messages):
        return messages
    return [{"role": "system", "content": system}, *messages]


def prompt_batch(prompt: Any) -> list[Any]:
    """The prompts of a completions `prompt`: a list of strings or of token-id lists is a
    batch; anything else is one prompt."""
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt) or all(isinstance(p, list) for p in prompt):
            return list(prompt)
    return [prompt]


def prompt_words_completion(prompt: Any) -> list[str]:
    """Completions: one token per whitespace-separated word, or per id of a token-id list."""
    if isinstance(prompt, list):
        if prompt and all(isinstance(t, int) for t in prompt):
            return [str(t) for t in prompt]
        return " ".join(p for p in prompt if isinstance(p, str)).split()
    if isinstance(prompt, str):
        return prompt.split()
    return []


def chat_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [content_text(m.get("content")) for m in messages if isinstance(m, dict)]


def render_chat_plain(messages: list[dict[str, Any]]) -> str:
    """A template-free rendering, for the engine source when the model has no chat template."""
    lines = [f"{m.get('role', 'user')}: {content_text(m.get('content'))}" for m in messages]
    return "\n".join(lines) + "\nassistant:"


def stop_list(stop: Any) -> list[str]:
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list):
        return [s for s in stop if isinstance(s, str)]
    return []


def object_field(body: dict[str, Any], name: str) -> dict[str, Any]:
    """A body field that should be a JSON object (`stream_options`, sampling parameters); {} otherwise."""
    value = body.get(name)
    return value if isinstance(value, dict) else {}


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_openai_body(
    body: dict[str, Any], kind: str, request_id: str, faults: Any, max_tokens: int | None = None
) -> SimRequest:
    """A `SimRequest` from an OpenAI chat or completions body (already validated)."""
    ids: list[int] | None = None
    echo: list[str] = []
    if kind == "chat":
        messages = body.get("messages") or []
        words = prompt_words_chat(messages)
        text = render_chat_plain(messages)
        word_lists = [words]
    else:
        messages = None
        batch = prompt_batch(body.get("prompt"))
        word_lists = [prompt_words_completion(p) for p in batch]
        words = max(word_lists, key=len)
        longest = batch[word_lists.index(words)]
        if isinstance(longest, list) and longest and all(isinstance(t, int) for t in longest):
            ids = list(longest)
        text = batch[0] if len(batch) == 1 and isinstance(batch[0], str) else " ".join(words)
        if body.get("echo") is True:
            echo = [p if isinstance(p, str) else " ".join(w) for p, w in zip(batch, word_lists)]
    if max_tokens is None:
        max_tokens = int_or_none(body.get("max_completion_tokens"))
        if max_tokens is None:
            max_tokens = int_or_none(body.get("max_tokens"))
    n = max(1, int_or_none(body.get("n")) or 1)
    counts = [len(w) for w in word_lists] if len(word_lists) > 1 else []
    return SimRequest(
        request_id=request_id,
        kind=kind,
        prompt_words=words,
        prompt_text=text,
        max_tokens=max_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        stop=stop_list(body.get("stop")),
        seed=int_or_none(body.get("seed")),
        n=n * max(1, len(counts)),
        temperature=body.get("temperature"),
        messages=messages,
        faults=faults,
        prompt_counts=counts,
        prompt_ids=ids,
        echo_texts=echo,
    )


def texts_of(body: dict[str, Any], kind: str) -> list[str]:
    """The prompt texts in which fault markers are looked for."""
    if kind == "chat":
        messages = body.get("messages")
        return chat_texts(messages) if isinstance(messages, list) else []
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list):
        return [p for p in prompt if isinstance(p, str)]
    return []
