"""gateway/http/request_io.py's head_fields: the request's header fields by name, read
as Starlette's Headers.get reads them (the first of a repeated field, latin-1)."""

from __future__ import annotations

from starlette.datastructures import Headers

from gateway.http.request_io import head_fields


def test_each_field_by_name_the_first_of_a_repeated_one_as_starlette_reads_it() -> None:
    raw = [(b"x-a", b"1"), (b"content-type", b"application/json"), (b"x-a", b"2"), (b"x-b", b"3"), (b"x-a", b"4")]
    fields = head_fields(raw)
    assert fields == {"x-a": "1", "content-type": "application/json", "x-b": "3"}
    assert all(Headers(raw=raw).get(name) == value for name, value in fields.items())


def test_names_and_values_are_latin_1() -> None:
    assert head_fields([(b"x-\xe9", b"caf\xe9")]) == {"x-é": "café"}


def test_no_field_is_an_empty_mapping() -> None:
    assert head_fields([]) == {}
