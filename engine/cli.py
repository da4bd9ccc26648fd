"""`switchyard engine ...` subcommands.

`register(subparsers)` creates the `engine` command and keeps its sub-subparsers
in `ENGINE_SUBPARSERS`, so other areas (the gateway's `engine serve`) can add
their own subcommands under `engine`; `engine_subparsers(subparsers)` returns
them, creating the `engine` command first when it does not exist yet. Heavy
imports (torch) happen only when a command runs.
"""

from __future__ import annotations

import argparse
import time

ENGINE_SUBPARSERS: argparse._SubParsersAction | None = None
_OWNER: argparse._SubParsersAction | None = None  # the top-level subparsers `engine` was added to


def engine_subparsers(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The `engine` command's subparsers under `subparsers`, created once per parser."""
    global ENGINE_SUBPARSERS, _OWNER
    if ENGINE_SUBPARSERS is not None and _OWNER is subparsers:
        return ENGINE_SUBPARSERS
    engine = subparsers.add_parser("engine", help="the native paged-KV engine")
    ENGINE_SUBPARSERS = engine.add_subparsers(dest="engine_command", required=True)
    _OWNER = subparsers
    _add_make_tiny(ENGINE_SUBPARSERS)
    return ENGINE_SUBPARSERS


def register(subparsers: argparse._SubParsersAction) -> None:
    engine_subparsers(subparsers)


def _add_make_tiny(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "make-tiny",
        help="build a tiny random-weight Llama model with a trained byte-level BPE tokenizer",
        description="Deterministic: the same arguments give byte-identical files. head_dim (hidden/heads) "
        "64 is what a real vLLM CPU build accepts.",
    )
    p.add_argument("dir", help="output directory (created if missing)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=1)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--intermediate", type=int, default=None, help="MLP width (default 2 x hidden)")
    p.set_defaults(func=_run_make_tiny)


def _run_make_tiny(args: argparse.Namespace) -> int:
    from engine.make_tiny import TinySpec, make_tiny

    try:
        spec = TinySpec(
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            kv_heads=args.kv_heads,
            vocab=args.vocab,
            intermediate=args.intermediate or 2 * args.hidden,
        )
    except ValueError as exc:
        raise SystemExit(f"switchyard engine make-tiny: {exc}") from exc
    started = time.perf_counter()
    out = make_tiny(args.dir, seed=args.seed, spec=spec)
    print(
        f"tiny model written to {out} in {time.perf_counter() - started:.1f}s "
        f"(layers={spec.layers} hidden={spec.hidden} heads={spec.heads} kv_heads={spec.kv_heads} "
        f"head_dim={spec.head_dim} vocab={spec.vocab} seed={args.seed})"
    )
    return 0
