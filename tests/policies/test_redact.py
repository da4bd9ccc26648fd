"""The one redaction rule (policies/redact.py), case by case."""

from __future__ import annotations

import logging
import time

import pytest

from gateway.observe.log_lines import SafeLines
from policies.redact import clip, escape_controls, public_message, redact_text, redact_url, secret_name, shown_name


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://user:pw@h/0", "redis://user:***@h/0"),
        ("https://token@h/v1", "https://***@h/v1"),
        ("redis://h:1/0?password=pw&db=2", "redis://h:1/0?password=***&db=2"),
        (
            "http://h/x?access_token=t&api_key=k&sig=s&limit=3",
            "http://h/x?access_token=***&api_key=***&sig=***&limit=3",
        ),
        ("http://h:80/v1", "http://h:80/v1"),
    ],
)
def test_urls(url, shown):
    assert redact_url(url) == shown


def test_free_text_masks_urls_pairs_headers_and_bearer_tokens_but_not_ordinary_words():
    text = (
        "connect redis://u:pw1@h/0 failed; password=pw2 token=pw3 Authorization: Bearer pw4 "
        "api-key: pw5 cookie: sid=pw6; Basic dXNlcjpwYXNzd29yZA== max_tokens=5 limit=3 the token estimate"
    )
    said = redact_text(text)
    for secret in ("pw1", "pw2", "pw3", "pw4", "pw5", "pw6", "dXNlcjpwYXNzd29yZA=="):
        assert secret not in said
    assert "max_tokens=5" in said and "limit=3" in said and "the token estimate" in said


def test_secret_names_cover_credential_headers_and_fields_but_not_token_counts():
    for name in ("Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "api_key", "client_secret", "sig"):
        assert secret_name(name), name
    for name in ("x-request-id", "max_tokens", "prompt_tokens", "limit", "model"):
        assert not secret_name(name), name


def test_names_are_clipped_masked_and_escaped():
    assert clip("abc", 5) == "abc" and clip("abcdef", 3) == "abc...(6 characters)"
    assert escape_controls("a\nb\x1b\u2028\x85") == "a\\u000ab\\u001b\\u2028\\u0085"
    long_url = "redis://u:" + "p" * 300 + "@h"
    assert "ppp" not in shown_name(long_url) and shown_name(long_url).endswith(f"({len(long_url)} characters)")
    assert len(public_message("x" * 10**6)) < 2100


def test_a_log_record_stays_one_line_and_its_traceback_cannot_forge_one():
    record = logging.LogRecord(
        "t", logging.WARNING, __file__, 1, "model %s password=%s", ("m\nINFO forged", "pw"), None
    )
    try:
        raise ValueError("boom\nINFO forged-too\x1b[31m")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert SafeLines().filter(record)
    out = logging.Formatter("%(levelname)s %(message)s").format(record)
    lines = out.split("\n")
    assert lines[0] == "WARNING model m\\u000aINFO forged password=***"
    assert all(line.startswith(" ") for line in lines[1:]) and "\x1b" not in out


@pytest.mark.parametrize("text", ["a" * 200_000 + " b=1", "a" * 200_000 + "://x", "a." * 100_000 + " b=1"])
def test_the_rule_reads_a_hostile_text_in_linear_time(text):
    """Each pattern starts only where a run of name characters starts. Quadratic
    scanning took about 5 s for 10,000 characters here, so 200,000 would take more than
    half an hour; linear takes well under a second. The bound (20 s) is generous on
    purpose: it tells the two apart on the busiest machine."""
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 20
