"""`switchyard keys create` in process, every form of its output: the JSON object
(with and without a tenant), the text without a tenant (no config entry), with a
tenant but no name (an entry without `name`), and the parser's refusals."""

from __future__ import annotations

import argparse
import json

import pytest

from policies.api_keys import KEY_PREFIX
from policies.auth import hash_key
from policies.cli import register

WARNING = "Store the key now: only its digest goes into the config, so it cannot be shown again."


def run(capsys, *argv: str) -> list[str]:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["keys", "create", *argv])
    assert args.func(args) == 0
    return capsys.readouterr().out.splitlines()


def test_json_names_the_key_its_digest_the_tenant_and_the_name(capsys):
    [line] = run(capsys, "--json", "--tenant", "acme", "--name", "ci")
    data = json.loads(line)
    assert data == {"key": data["key"], "sha256": hash_key(data["key"]), "tenant": "acme", "name": "ci"}
    assert data["key"].startswith(KEY_PREFIX)
    [line] = run(capsys, "--json")
    assert {k: v for k, v in json.loads(line).items() if k in ("tenant", "name")} == {"tenant": None, "name": None}


def test_text_without_a_tenant_has_no_config_entry(capsys):
    lines = run(capsys)
    assert lines[0].startswith("key:    " + KEY_PREFIX)
    assert lines[1] == "sha256: " + hash_key(lines[0].removeprefix("key:    "))
    assert lines[2:] == [WARNING]
    assert run(capsys, "--name", "ci")[2:] == [WARNING]  # a name alone makes no entry either


def test_text_with_a_tenant_and_no_name_has_an_entry_without_a_name(capsys):
    lines = run(capsys, "--tenant", "acme")
    digest = lines[1].removeprefix("sha256: ")
    assert lines[2] == "config: - " + json.dumps({"sha256": digest, "tenant": "acme"})
    assert lines[3:] == [WARNING]


def test_two_keys_are_never_the_same(capsys):
    assert run(capsys)[0] != run(capsys)[0]


def test_keys_needs_a_subcommand():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    with pytest.raises(SystemExit):
        parser.parse_args(["keys"])


def test_the_help_says_what_each_command_and_option_does(capsys):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    for argv in (["--help"], ["keys", "--help"], ["keys", "create", "--help"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for text in (
        "manage API keys",
        "print a new API key and its SHA-256 digest",
        "also print a config entry for this tenant",
        "a name for the key (shown in logs and metrics)",
        "print one JSON object",
    ):
        assert text in shown
