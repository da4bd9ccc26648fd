"""`switchyard keys create`: a new API key and the SHA-256 digest to put in the
config (the gateway never stores the key itself)."""

from __future__ import annotations

import argparse
import json

from policies.auth import generate_key, hash_key


def register(subparsers: argparse._SubParsersAction) -> None:
    keys = subparsers.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="print a new API key and its SHA-256 digest")
    create.add_argument("--tenant", help="also print a config entry for this tenant")
    create.add_argument("--name", help="a name for the key (shown in logs and metrics)")
    create.add_argument("--json", action="store_true", help="print one JSON object")
    create.set_defaults(func=_create)


def _create(args: argparse.Namespace) -> int:
    key = generate_key()
    digest = hash_key(key)
    if args.json:
        print(json.dumps({"key": key, "sha256": digest, "tenant": args.tenant, "name": args.name}))
        return 0
    print(f"key:    {key}")
    print(f"sha256: {digest}")
    if args.tenant:
        entry = {"sha256": digest, "tenant": args.tenant}
        if args.name:
            entry["name"] = args.name
        print("config: - " + json.dumps(entry))
    print("Store the key now: only its digest goes into the config, so it cannot be shown again.")
    return 0
