"""`switchyard keys create` prints a key whose digest is the one it prints."""

from __future__ import annotations

import json
import subprocess
import sys

from policies.auth import hash_key


def test_keys_create_prints_a_key_and_its_digest():
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "keys", "create", "--json", "--tenant", "acme"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out)
    assert data["sha256"] == hash_key(data["key"])
    assert data["tenant"] == "acme"


def test_keys_create_text_form_has_a_config_entry(capsys):
    import argparse

    from policies.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["keys", "create", "--tenant", "acme", "--name", "ci"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    key = lines[0].split()[-1]
    digest = lines[1].split()[-1]
    assert digest == hash_key(key)
    assert json.loads(lines[2].removeprefix("config: - ")) == {"sha256": digest, "tenant": "acme", "name": "ci"}
