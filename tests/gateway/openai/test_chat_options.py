"""`parse_chat` skips the chat options' readers for a body that sends none of
CHAT_OPTIONS: that shortcut must give what the readers give, and must know every
option they read."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.openai.requests import CHAT_OPTIONS, parse_chat

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


class Reads(dict):
    """A body that records the fields read from it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


def test_the_shortcut_knows_every_option_the_readers_read() -> None:
    plain = Reads(BODY)
    parse_chat(plain, "r")
    full = Reads({**BODY, "logprobs": None})  # an option sent (as null): the readers run
    parse_chat(full, "r")
    assert full.read - plain.read == CHAT_OPTIONS


@pytest.mark.parametrize("option", sorted(CHAT_OPTIONS))
def test_a_body_without_chat_options_gets_what_the_readers_give(option: str) -> None:
    assert parse_chat(dict(BODY), "r") == parse_chat({**BODY, option: None}, "r")


def test_an_option_sent_is_read() -> None:
    req = parse_chat({**BODY, "logprobs": True, "top_logprobs": 2, "parallel_tool_calls": False}, "r")
    assert req.sampling.logprobs and req.sampling.top_logprobs == 2 and req.parallel_tool_calls is False
