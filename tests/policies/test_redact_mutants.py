"""policies/redact.py's outputs in full (the case tests check that a secret is gone;
these check what is shown instead), and its length limits at, below and above the
boundary: a clipped name, an error message, a client's name."""

from __future__ import annotations

from policies.redact import MESSAGE_LIMIT, NAME_LIMIT, clip, public_message, redact_text, redact_url, shown_name


def test_a_url_that_cannot_be_parsed_still_has_its_secret_pairs_masked():
    assert redact_url("http://[bad?token=abc&limit=3") == "http://[bad?token=***&limit=3"


def test_userinfo_splits_at_the_last_at_sign_and_the_first_colon():
    assert redact_url("redis://user:p@ss@host/0") == "redis://user:***@host/0"
    assert redact_url("redis://user:pa:ss@host/0") == "redis://user:***@host/0"
    assert redact_url("https://tok@en@host/v1") == "https://***@host/v1"


def test_free_text_shows_each_masked_secret_in_place():
    assert redact_text("connect redis://u:pw@h/0 failed") == "connect redis://u:***@h/0 failed"
    assert redact_text("api-key: pw5 next") == "api-key: *** next"
    assert redact_text("Cookie: sid=1 rest") == "Cookie: *** rest"


def test_a_bearer_token_alone_and_basic_credentials_alone_are_masked():
    assert redact_text("got Bearer abc.def now") == "got Bearer *** now"
    assert redact_text("got BEARER abc now") == "got BEARER *** now"
    assert redact_text("login Basic dXNlcjpwYXNzd29yZA== failed") == "login Basic *** failed"
    assert redact_text("a basic fact") == "a basic fact"  # the word alone is no credential


def test_clip_at_below_and_above_its_limit():
    assert clip("abc", 4) == "abc"
    assert clip("abc", 3) == "abc"
    assert clip("abcd", 3) == "abc...(4 characters)"
    assert clip("x" * NAME_LIMIT) == "x" * NAME_LIMIT
    assert clip("x" * (NAME_LIMIT + 1)) == "x" * NAME_LIMIT + f"...({NAME_LIMIT + 1} characters)"


def test_public_message_at_below_and_above_its_limit():
    assert public_message("password=pw") == "password=***"
    assert public_message("x" * 9, limit=10) == "x" * 9
    assert public_message("x" * 10, limit=10) == "x" * 10
    assert public_message("x" * 11, limit=10) == "x" * 10 + "...(11 characters)"
    at = "y" * MESSAGE_LIMIT
    assert public_message(at) == at
    assert public_message(at + "y") == at + f"...({MESSAGE_LIMIT + 1} characters)"


def test_shown_name_at_below_and_above_its_limit():
    assert shown_name("m\nx") == "m\\u000ax"
    assert shown_name("key=k1") == "key=***"
    assert shown_name("x" * 9, limit=10) == "x" * 9
    assert shown_name("x" * 10, limit=10) == "x" * 10
    assert shown_name("x" * 11, limit=10) == "x" * 10 + "...(11 characters)"
    assert shown_name("n" * NAME_LIMIT) == "n" * NAME_LIMIT
