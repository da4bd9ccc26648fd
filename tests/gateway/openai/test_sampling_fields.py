"""`sampling_params` skips its readers for a body that sends none of SAMPLING_FIELDS:
that shortcut must give what the readers give, and must know every field they read."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.base import SamplingParams
from gateway.openai.request_fields import SAMPLING_FIELDS, sampling_params


class Reads(dict):
    """A body that records the fields read from it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


def test_the_shortcut_knows_every_field_the_readers_read() -> None:
    body = Reads({"temperature": None})  # sent (as null): the readers run
    sampling_params(body, max_tokens=None)
    assert body.read == SAMPLING_FIELDS


@pytest.mark.parametrize("field", sorted(SAMPLING_FIELDS))
def test_a_body_without_sampling_fields_gets_what_the_readers_give(field: str) -> None:
    read = sampling_params({field: None}, max_tokens=7)  # each reader takes null as not sent
    assert sampling_params({"model": "m"}, max_tokens=7) == read == SamplingParams(max_tokens=7)


def test_a_body_with_one_sampling_field_is_read() -> None:
    assert sampling_params({"temperature": 0.5, "n": 2}, max_tokens=None).temperature == 0.5
