"""`python -m bench.llamacpp_prefix` (`make bench-llamacpp-prefix`): what prefix reuse
buys on llama.cpp's server, the two decisions of docs/adapters.md measured.

- Across servers: two `llama-server`s behind one gateway, the same multi-turn
  conversations routed `round_robin` and `prefix_affinity`.
- Within a server: one `llama-server` of two slots, the conversations sent to it
  directly, with `id_slot` pinned per conversation and without (llama.cpp then picks
  the idle slot whose last prompt shares most with the new one).

Per run: the share of prompt tokens the server found cached (the answers'
`usage.prompt_tokens_details.cached_tokens` over `prompt_tokens`), TTFT p50/p90 and
failures. Each run's conversations open with their own system prompt, so no run finds
what another cached. Needs `.venv-llamacpp` (scripts/install-llamacpp.sh). Prints a
table and writes `result.json` and `README.md` to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.client import Client, ClientConfig
from bench.metrics import distribution_ms, request_metrics
from bench.procs import Server, python_module
from bench.records import RequestRecord
from engine.make_tiny import make_tiny
from processes import LLAMA_SERVER, free_port, llamacpp_server_argv, write_gguf

SLOTS = 2
SLOT_CTX = 4096
POLICIES = ("round_robin", "prefix_affinity")
WORDS = "the quick brown fox jumps over a lazy dog while seven wise owls watch from old oak trees".split()


def system_prompt(tag: str, conv: int, words: int) -> str:
    """A conversation's own opening: `words` words, different per run and conversation."""
    body = " ".join(WORDS[(conv * 7 + i) % len(WORDS)] for i in range(words))
    return f"[{tag} conversation {conv}] {body}"


def turns(tag: str, conversations: int, count: int, words: int) -> list[tuple[int, list[dict[str, str]]]]:
    """(conversation, messages) of every request, turn by turn, the conversations
    interleaved; each turn's messages are the last turn's plus a fixed answer and a
    new question, so its prompt extends the one before."""
    histories = [[{"role": "system", "content": system_prompt(tag, c, words)}] for c in range(conversations)]
    out = []
    for t in range(count):
        for c, history in enumerate(histories):
            if t:
                history.append({"role": "assistant", "content": "Noted, go on."})
            history.append({"role": "user", "content": f"Question {t} of conversation {c}: what comes next?"})
            out.append((c, list(history)))
    return out


async def drive(
    client: Client,
    requests: list[tuple[int, list[dict[str, str]]]],
    concurrency: int,
    max_tokens: int,
    slot_of: dict[int, int] | None,
) -> list[RequestRecord]:
    """Sends the requests in order, `concurrency` at a time; with `slot_of`, each
    carries `id_slot` of its conversation (only llama.cpp reads it)."""
    gate = asyncio.Semaphore(concurrency)
    t0 = time.perf_counter()
    records: list[RequestRecord] = []

    async def one(i: int, conv: int, messages: list[dict[str, str]]) -> None:
        rec = RequestRecord(index=i, tenant="t", session=conv, turn=len(messages) // 2, stream=True, sent_s=0.0)
        rec.max_tokens = max_tokens
        records.append(rec)
        if slot_of is not None:  # read as send() builds the body, before it awaits anything
            client.config.extra_body = {"id_slot": slot_of[conv]}
        await client.send(rec, messages, t0)

    pending = []
    for i, (conv, messages) in enumerate(requests):
        await gate.acquire()
        task = asyncio.create_task(one(i, conv, messages))
        task.add_done_callback(lambda _t: gate.release())
        pending.append(task)
    await asyncio.gather(*pending)
    return records


def summary(records: list[RequestRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.outcome == "ok"]
    prompt = sum(r.usage_prompt_tokens or 0 for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)
    ttft = distribution_ms(m.ttft_s for r in ok if (m := request_metrics(r)) is not None and m.ttft_s is not None)
    return {
        "requests": len(records),
        "failed": len(records) - len(ok),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_share": round(cached / prompt, 4) if prompt else None,
        "ttft_p50_ms": ttft["p50"],
        "ttft_p90_ms": ttft["p90"],
        "errors": sorted({f"{r.status} {r.error}"[:160] for r in records if r.outcome != "ok"}),
    }


def llama_server(gguf: Path, name: str, logs: Path) -> Server:
    port = free_port()
    argv = llamacpp_server_argv(gguf, port, SLOT_CTX * SLOTS, parallel=SLOTS)
    return Server(name, argv, f"http://127.0.0.1:{port}/health", logs, ready_timeout_s=180)


def gateway_config(port: int, servers: list[Server]) -> dict[str, Any]:
    backends = [
        {"name": s.name, "adapter": "llamacpp", "url": s.base_url, "served_model": "tiny", "max_inflight": SLOTS}
        for s in servers
    ]
    models = {p: {"routing": p, "backends": backends} for p in POLICIES}
    return {"listen": {"host": "127.0.0.1", "port": port}, "models": models, "log_level": "warning"}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="llamacpp-prefix-"))
    gguf = write_gguf(make_tiny(logs / "tiny", seed=0), logs / "tiny.gguf")
    shape = {"conversations": args.conversations, "turns": args.turns, "system_words": args.words}
    shape["concurrency"] = args.concurrency
    result: dict[str, Any] = {"settings": {**shape, "slots": SLOTS, "max_tokens": args.max_tokens}, "runs": []}
    with llama_server(gguf, "llama0", logs) as a, llama_server(gguf, "llama1", logs) as b:
        port = free_port()
        (logs / "gateway.yaml").write_text(yaml.safe_dump(gateway_config(port, [a, b])))
        argv = python_module("gateway.cli", "serve", "--config", str(logs / "gateway.yaml"))
        with Server("gateway", argv, f"http://127.0.0.1:{port}/readyz", logs, ready_timeout_s=120) as gw:
            for rep in range(args.repeats):
                for policy in POLICIES if rep % 2 == 0 else POLICIES[::-1]:
                    reqs = turns(f"{policy}#{rep}", args.conversations, args.turns, args.words)
                    async with Client(ClientConfig(gw.base_url, policy)) as client:
                        recs = await drive(client, reqs, args.concurrency, args.max_tokens, None)
                    result["runs"].append({"where": "across servers", "how": policy, "rep": rep, **summary(recs)})
        for rep in range(args.repeats):
            for pinned in (True, False) if rep % 2 == 0 else (False, True):
                how = "id_slot pinned" if pinned else "llama.cpp picks"
                reqs = turns(f"{how}#{rep}", args.conversations, args.turns, args.words)
                slots = {c: c % SLOTS for c in range(args.conversations)} if pinned else None
                async with Client(ClientConfig(a.base_url, "tiny")) as client:
                    recs = await drive(client, reqs, args.concurrency, args.max_tokens, slots)
                result["runs"].append({"where": "within a server", "how": how, "rep": rep, **summary(recs)})
    return result


def table(result: dict[str, Any]) -> str:
    head = "| where | how | rep | requests | failed | cached share | TTFT p50 ms | TTFT p90 ms |\n|---|---|---|---|---|---|---|---|"
    rows = [
        f"| {r['where']} | {r['how']} | {r['rep']} | {r['requests']} | {r['failed']} | {r['cached_share']} "
        f"| {r['ttft_p50_ms']:.1f} | {r['ttft_p90_ms']:.1f} |"
        for r in result["runs"]
    ]
    return "\n".join([head, *rows])


def report(result: dict[str, Any]) -> str:
    errors = sorted({e for r in result["runs"] for e in r["errors"]})
    return (
        "# Prefix reuse on llama.cpp's server\n\n`make bench-llamacpp-prefix` "
        f"({json.dumps(result['settings'])}); bench/llamacpp_prefix.py says what each run is, "
        "docs/runtimes.md §8.7 what it shows.\n\n"
        f"{table(result)}\n\nFailures seen: {errors or 'none'}\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conversations", type=int, default=5, help="odd, so round robin does not keep them by accident")
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--words", type=int, default=300, help="system prompt words (about 1.3 tokens each)")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=SLOTS, help="requests in flight (a server has 2 slots)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("docs/bench/llamacpp-prefix"))
    args = p.parse_args(argv)
    if not LLAMA_SERVER.exists():
        p.error("no .venv-llamacpp: run scripts/install-llamacpp.sh (make test-llamacpp does)")
    result = asyncio.run(run(args))
    text = table(result)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "README.md").write_text(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
