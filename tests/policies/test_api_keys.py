"""The API key table on its own (no Authenticator): digests, what a key entry may
hold and how each bad one is named, the mounted file's reading, rotation, its
re-check interval, and a broken version counted once."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
import yaml

from gateway.config.auth import ApiKeyEntry
from policies.api_keys import KEY_PREFIX, ApiKeyTable, KeyRecord, generate_key, hash_key, key_record

DIGEST = hash_key("sk-sy-one")


def write(path: Path, entries) -> None:
    """Write a key file and move its mtime on: a rewrite within one tick of the
    file system clock would otherwise look unchanged."""
    path.write_text(entries if isinstance(entries, str) else yaml.safe_dump(entries))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def read_once(tmp_path: Path) -> tuple[Path, ApiKeyTable]:
    """A keys file holding sk-sy-one for tenant acme, and a table over it that has read
    it once and looks at it again on every lookup (recheck_s=0)."""
    path = tmp_path / "keys.yaml"
    write(path, [{"sha256": DIGEST, "tenant": "acme"}])
    table = ApiKeyTable([], str(path), None, recheck_s=0)
    table.load_file()
    return path, table


# ---- digests and records ---------------------------------------------------------------


def test_hash_key_is_the_hex_sha256_of_the_key():
    assert hash_key("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_generated_keys_carry_the_prefix_and_32_random_bytes():
    keys = {generate_key() for _ in range(20)}
    assert len(keys) == 20
    assert all(k.startswith(KEY_PREFIX) and len(k) == len(KEY_PREFIX) + 43 for k in keys)  # base64url of 32 bytes


def test_a_key_is_named_by_its_name_or_else_by_its_digest():
    assert KeyRecord(DIGEST, "t", name="ci").key_id == "ci"
    assert KeyRecord(DIGEST, "t").key_id == DIGEST[:12]


def test_a_record_carries_every_field_of_its_entry():
    raw = {
        "sha256": DIGEST.upper(),
        "tenant": "acme",
        "name": "ci",
        "models": ["tiny"],
        "tier": 0,
        "requests_per_minute": 5,
        "tokens_per_minute": 600,
        "max_concurrent": 2,
    }
    expected = KeyRecord(DIGEST, "acme", "ci", ["tiny"], 0, 5, 600, 2)  # the digest lower-cased
    assert key_record(raw) == expected
    assert key_record(ApiKeyEntry.model_validate(raw | {"sha256": DIGEST})) == expected  # a config entry
    assert key_record({"sha256": DIGEST, "tenant": 7}) == KeyRecord(DIGEST, "7")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sha256": DIGEST[:63]}, "sha256 must be a 64-character hex digest"),
        ({"sha256": DIGEST + "0"}, "sha256 must be a 64-character hex digest"),
        ({"sha256": "g" + DIGEST[1:]}, "sha256 must be a 64-character hex digest"),
        ({"models": "tiny"}, f"key {DIGEST[:12]}: models must be a list of model names"),
        ({"models": ["tiny", 3]}, f"key {DIGEST[:12]}: models must be a list of model names"),
        ({"name": 12}, f"key {DIGEST[:12]}: name must be a string"),
        ({"tier": -1}, f"key {DIGEST[:12]}: tier must be a non-negative integer"),
        ({"tier": True}, f"key {DIGEST[:12]}: tier must be a non-negative integer"),
        ({"requests_per_minute": 1.5}, f"key {DIGEST[:12]}: requests_per_minute must be a non-negative integer"),
        ({"tokens_per_minute": "9"}, f"key {DIGEST[:12]}: tokens_per_minute must be a non-negative integer"),
        ({"max_concurrent": -3}, f"key {DIGEST[:12]}: max_concurrent must be a non-negative integer"),
    ],
)
def test_each_bad_entry_is_refused_naming_the_key_and_the_field(change, message):
    with pytest.raises(ValueError) as exc:
        key_record({"sha256": DIGEST, "tenant": "acme"} | change)
    assert str(exc.value) == message


# ---- the table --------------------------------------------------------------------------


def test_a_table_without_a_file_answers_from_the_config():
    table = ApiKeyTable([key_record({"sha256": DIGEST, "tenant": "acme"})], None, None)
    table.load_file()  # nothing to read
    assert table.lookup("sk-sy-one") == KeyRecord(DIGEST, "acme")
    assert table.lookup("sk-sy-two") is None
    assert table.reload_errors == 0


def test_the_file_may_be_a_list_or_a_mapping_with_api_keys(tmp_path):
    path = tmp_path / "keys.yaml"
    for content in ([{"sha256": DIGEST, "tenant": "acme"}], {"api_keys": [{"sha256": DIGEST, "tenant": "acme"}]}):
        write(path, content)
        table = ApiKeyTable([], str(path), None)
        table.load_file()
        assert table.lookup("sk-sy-one") == KeyRecord(DIGEST, "acme")
    for empty in ("", "{}", "{other_section: 1}"):  # no keys, and not an error
        write(path, empty)
        table = ApiKeyTable([], str(path), None)
        table.load_file()
        assert table.lookup("sk-sy-one") is None and table.reload_errors == 0


def test_a_file_key_of_an_unknown_tenant_is_skipped_and_logged(tmp_path, caplog):
    path = tmp_path / "keys.yaml"
    other = hash_key("sk-sy-other")
    # The unknown tenant's key first: the keys after it are still read.
    write(path, [{"sha256": other, "tenant": "initech"}, {"sha256": DIGEST, "tenant": "acme", "name": "ci"}])
    table = ApiKeyTable([], str(path), {"acme"})
    with caplog.at_level(logging.ERROR, "switchyard.auth"):
        table.load_file()
    assert table.lookup("sk-sy-one") is not None and table.lookup("sk-sy-other") is None
    assert table.reload_errors == 0  # the rest of the file is good
    (record,) = caplog.records
    assert record.getMessage() == f"api_keys_file {path}: key {other[:12]} names unknown tenant 'initech'; ignored"
    # Without a tenant list (no tenants configured) every tenant is accepted.
    open_table = ApiKeyTable([], str(path), None)
    open_table.load_file()
    assert open_table.lookup("sk-sy-other") is not None


def test_the_file_is_rechecked_only_after_the_interval(tmp_path):
    path = tmp_path / "keys.yaml"
    write(path, [{"sha256": DIGEST, "tenant": "acme"}])
    table = ApiKeyTable([], str(path), None, recheck_s=0.3)
    assert table.lookup("sk-sy-one") is not None  # the first lookup reads it
    write(path, [{"sha256": hash_key("sk-sy-two"), "tenant": "acme"}])
    assert table.lookup("sk-sy-two") is None  # within the interval: not looked at
    time.sleep(0.35)
    assert table.lookup("sk-sy-two") is not None
    assert table.lookup("sk-sy-one") is None  # rotated out


def test_an_unchanged_mtime_is_not_reread(tmp_path):
    path, table = read_once(tmp_path)
    st = path.stat()
    path.write_text(yaml.safe_dump([{"sha256": hash_key("sk-sy-two"), "tenant": "acme"}]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime: taken as the same version
    assert table.lookup("sk-sy-one") is not None and table.lookup("sk-sy-two") is None


def test_a_broken_version_is_counted_and_logged_once_and_the_good_keys_stay(tmp_path, caplog):
    path, table = read_once(tmp_path)
    write(path, "- 42")
    with caplog.at_level(logging.ERROR, "switchyard.auth"):
        for _ in range(3):
            assert table.lookup("sk-sy-one") is not None
    assert table.reload_errors == 1
    (record,) = caplog.records
    assert record.getMessage() == (
        f"api_keys_file {path} not used, the previous keys stay in force: "
        "TypeError: expected a key entry (a mapping), not int"
    )
    write(path, "just a string")  # another broken version: counted again
    table.lookup("sk-sy-one")
    assert table.reload_errors == 2
    assert "expected a list of key entries, not str" in caplog.records[-1].getMessage()


def test_a_file_that_vanishes_is_counted_once_and_read_again_when_it_returns(tmp_path, caplog):
    path, table = read_once(tmp_path)
    path.unlink()
    with caplog.at_level(logging.ERROR, "switchyard.auth"):
        for _ in range(3):
            assert table.lookup("sk-sy-one") is not None  # the last good keys stay
    assert table.reload_errors == 1
    assert caplog.records[0].getMessage().startswith(f"api_keys_file {path} unreadable: ")
    write(path, [{"sha256": hash_key("sk-sy-two"), "tenant": "acme"}])
    assert table.lookup("sk-sy-two") is not None
    path.unlink()  # gone again after a good read: a new failure, counted again
    table.lookup("sk-sy-two")
    assert table.reload_errors == 2


def test_a_file_back_with_its_old_mtime_after_vanishing_is_not_a_new_error(tmp_path):
    path, table = read_once(tmp_path)
    st = path.stat()
    text = path.read_text()
    path.unlink()
    table.load_file()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    table.load_file()  # readable again: the 'unreadable' version is forgotten
    path.unlink()
    table.load_file()
    assert table.reload_errors == 2


def test_by_default_a_rotation_is_seen_within_a_second_or_so(tmp_path):
    path = tmp_path / "keys.yaml"
    write(path, [{"sha256": DIGEST, "tenant": "acme"}])
    table = ApiKeyTable([], str(path), None)
    assert table.lookup("sk-sy-one") is not None
    write(path, [{"sha256": hash_key("sk-sy-two"), "tenant": "acme"}])
    time.sleep(1.05)
    assert table.lookup("sk-sy-two") is not None
