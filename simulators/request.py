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
    generation: Any = None  # the running Generation, once started

    @property
    def prompt_tokens(self) -> int:
        if self.faults.prompt_tokens is not None:
            return self.faults.prompt_tokens
        return len(self.prompt_words)


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
    if kind == "chat":
        messages = body.get("messages") or []
        words = prompt_words_chat(messages)
        text = render_chat_plain(messages)
    else:
        messages = None
        prompt = body.get("prompt")
        words = prompt_words_completion(prompt)
        text = prompt if isinstance(prompt, str) else " ".join(words)
    if max_tokens is None:
        max_tokens = int_or_none(body.get("max_completion_tokens"))
        if max_tokens is None:
            max_tokens = int_or_none(body.get("max_tokens"))
    n = int_or_none(body.get("n")) or 1
    return SimRequest(
        request_id=request_id,
        kind=kind,
        prompt_words=words,
        prompt_text=text,
        max_tokens=max_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        stop=stop_list(body.get("stop")),
        seed=int_or_none(body.get("seed")),
        n=max(1, n),
        temperature=body.get("temperature"),
        messages=messages,
        faults=faults,
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
