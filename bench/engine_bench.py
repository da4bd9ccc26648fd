"""`make bench-engine`: the native engine against transformers generate() and a real vLLM.

Workloads (one tiny model, built by engine.make_tiny; random token-id prompts of mixed
lengths; 128 output tokens per request with EOS ignored):
  * throughput at concurrency 1 and 32: output tokens / wall time of the whole batch of
    requests (closed loop: a new request starts as soon as one finishes);
      - native:        AsyncEngine in process, streaming every token;
      - transformers:  generate() on static batches (batch 1, and left-padded batches of 32);
      - vLLM:          a real vLLM CPU server (bench/vllm_cpu.py) over
                       /v1/completions with token-id prompts, streaming, when
                       .venv-vllm is installed (scripts/install-vllm.sh);
  * shared prefix: a 1,000-token system prompt plus a short distinct suffix. Cold TTFT is
    the first request of a never-seen system prompt, warm TTFT a later request with the
    same system prompt (served from the prefix cache). TTFT = time from submitting the
    request to its first output token, one request at a time.
Results: a table on stdout and reports/engine/engine_bench.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import torch

from bench.client import Client, ClientConfig
from bench.metrics import request_metrics
from bench.records import RequestRecord
from bench.vllm_cpu import vllm_available, vllm_server
from engine.async_engine import AsyncEngine
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from processes import ChildFailed

ROOT = Path(__file__).resolve().parent.parent
OUTPUT_TOKENS = 128
SYSTEM_PROMPT_TOKENS = 1000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", help="an existing model directory (default: build the tiny model)")
    ap.add_argument("--requests-c1", type=int, default=6, help="requests in the concurrency-1 run")
    ap.add_argument("--requests-c32", type=int, default=64, help="requests in the concurrency-32 run")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved native/vLLM rounds; the best is reported")
    ap.add_argument("--min-prompt", type=int, default=32)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: on a small shared machine OpenMP's spinning "
        "workers cost more than they give; vLLM CPU also computes on one core here)",
    )
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "reports" / "engine"))
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def make_prompts(n: int, lo: int, hi: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    return [torch.randint(0, vocab, (length,), generator=g).tolist() for length in lengths]


def greedy_ignore_eos() -> SamplingParams:
    return SamplingParams(max_tokens=OUTPUT_TOKENS, temperature=0.0, ignore_eos=True)


# ---- native ------------------------------------------------------------------------


async def native_throughput(engine: AsyncEngine, prompts: list[list[int]], concurrency: int, tag: str) -> dict:
    queue: asyncio.Queue = asyncio.Queue()
    for i, p in enumerate(prompts):
        queue.put_nowait((i, p))
    ttfts: list[float] = []
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        while not queue.empty():
            i, p = queue.get_nowait()
            t0 = time.perf_counter()
            first = True
            async for out in engine.generate(f"{tag}-{i}", p, greedy_ignore_eos()):
                if first and out.token_ids:
                    ttfts.append(time.perf_counter() - t0)
                    first = False
                tokens += len(out.token_ids)

    start = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    wall = time.perf_counter() - start
    return {"output_tokens": tokens, "wall_s": wall, "tok_s": tokens / wall, "ttft_p50_s": statistics.median(ttfts)}


def offline_throughput(engine: LLMEngine, prompts: list[list[int]], concurrency: int, tag: str) -> dict:
    """The step loop driven directly (no thread, no asyncio): the engine's own ceiling."""
    pending = list(enumerate(prompts))[::-1]
    tokens = 0

    def admit() -> None:
        if pending:
            i, p = pending.pop()
            engine.add_request(f"{tag}-{i}", p, greedy_ignore_eos())

    for _ in range(concurrency):
        admit()
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens += len(out.token_ids)
            if out.finished:
                admit()
    wall = time.perf_counter() - start
    return {"output_tokens": tokens, "wall_s": wall, "tok_s": tokens / wall}


async def native_ttft(engine: AsyncEngine, prompt: list[int], rid: str) -> float:
    t0 = time.perf_counter()
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    async for out in engine.generate(rid, prompt, params):
        if out.token_ids:
            return time.perf_counter() - t0
    raise RuntimeError("no token")


def shared_prefix_prompts(vocab: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """Cold: a fresh system prompt each; warm: one system prompt, distinct suffixes."""
    g = torch.Generator().manual_seed(seed + 1)

    def rand(n: int) -> list[int]:
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    cold = [rand(SYSTEM_PROMPT_TOKENS) + rand(24) for _ in range(3)]
    system = cold[-1][:SYSTEM_PROMPT_TOKENS]
    warm = [system + rand(24) for _ in range(5)]
    return cold, warm


# ---- transformers ------------------------------------------------------------------


def run_transformers(model_dir: str, c1: list[list[int]], c32: list[list[int]]) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0

    def batch_generate(prompts: list[list[int]]) -> int:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding, as generate() expects for decoder-only models
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=OUTPUT_TOKENS,
                min_new_tokens=OUTPUT_TOKENS,
                pad_token_id=pad,
            )
        return (out.shape[1] - width) * len(prompts)

    batch_generate(c1[:1])
    result = {}
    for name, prompts, size in (("c1", c1, 1), ("c32", c32, 32)):
        start = time.perf_counter()
        tokens = sum(batch_generate(prompts[i : i + size]) for i in range(0, len(prompts), size))
        wall = time.perf_counter() - start
        result[name] = {"output_tokens": tokens, "wall_s": wall, "tok_s": tokens / wall}
    return result


# ---- vLLM --------------------------------------------------------------------------


async def vllm_stream(client: Client, prompt: list[int], max_tokens: int) -> tuple[int, float]:
    """One streamed completion through the load-test harness's client, so vLLM's
    TTFT and token counts follow bench/metrics.py's definitions."""
    rec = RequestRecord(index=0, tenant="default", session=0, turn=0, stream=True, sent_s=0.0, max_tokens=max_tokens)
    await client.send(rec, prompt, time.perf_counter())  # type: ignore[arg-type]
    m = request_metrics(rec)
    if m is None:
        raise RuntimeError(f"vLLM request failed: {rec.failure_kind}: {rec.error}")
    return m.output_tokens, m.ttft_s or 0.0


async def vllm_throughput(client: Client, prompts: list[list[int]], concurrency: int) -> dict:
    queue = list(prompts)[::-1]
    total = 0
    ttfts: list[float] = []

    async def worker() -> None:
        nonlocal total
        while queue:
            n, t = await vllm_stream(client, queue.pop(), OUTPUT_TOKENS)
            total += n
            ttfts.append(t)

    start = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    wall = time.perf_counter() - start
    return {"output_tokens": total, "wall_s": wall, "tok_s": total / wall, "ttft_p50_s": statistics.median(ttfts)}


# ---- the interleaved run -----------------------------------------------------------


def best(samples: list[dict]) -> dict:
    """The fastest round: on a shared machine, slower rounds measure the neighbours."""
    top = dict(max(samples, key=lambda r: r["tok_s"]))
    top["rounds_tok_s"] = [round(r["tok_s"], 1) for r in samples]
    return top


async def run_native_and_vllm(model_dir: str, args, vocab: int, vllm_url: str | None) -> dict:
    """Native and vLLM take turns on the same prompts, round by round, so both see the same
    machine; each round uses fresh prompts (no prefix-cache help from an earlier round)."""
    llm = LLMEngine(model_dir, max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=2048)
    engine = AsyncEngine(llm)
    vllm_client = None
    if vllm_url:
        vllm_client = Client(
            ClientConfig(
                base_url=vllm_url,
                model="tiny",
                endpoint="completions",
                timeout_s=900,
                ignore_eos=True,
                extra_body={"temperature": 0.0},
            )
        )
        await vllm_client.__aenter__()
    warm_prompts = make_prompts(2, args.min_prompt, args.max_prompt, vocab, args.seed + 999)
    await native_throughput(engine, warm_prompts, 2, "warmup")  # first-call allocations are not measured
    if vllm_client:
        await vllm_stream(vllm_client, warm_prompts[0], 8)
    native: dict = {"c1": [], "c32": []}
    vllm: dict = {"c1": [], "c32": []}
    try:
        for r in range(args.rounds):
            for key, n, concurrency in (("c1", args.requests_c1, 1), ("c32", args.requests_c32, 32)):
                prompts = make_prompts(n, args.min_prompt, args.max_prompt, vocab, args.seed + 100 * r + concurrency)
                native[key].append(await native_throughput(engine, prompts, concurrency, f"{key}-{r}"))
                if vllm_client:
                    vllm[key].append(await vllm_throughput(vllm_client, prompts, concurrency))
        result = {"native": {k: best(v) for k, v in native.items()}}
        if vllm_client:
            result["vllm"] = {k: best(v) for k, v in vllm.items()}
        cold, warm = shared_prefix_prompts(vocab, args.seed)
        cold_t = [await native_ttft(engine, p, f"cold-{i}") for i, p in enumerate(cold)]
        warm_t = [await native_ttft(engine, p, f"warm-{i}") for i, p in enumerate(warm)]
        result["native"]["prefix"] = {
            "cold_ttft_s": statistics.median(cold_t),
            "warm_ttft_s": statistics.median(warm_t),
            "cold_samples_s": cold_t,
            "warm_samples_s": warm_t,
        }
        if vllm_client:
            cold_v = [(await vllm_stream(vllm_client, p, 1))[1] for p in cold]
            warm_v = [(await vllm_stream(vllm_client, p, 1))[1] for p in warm]
            result["vllm"]["prefix"] = {
                "cold_ttft_s": statistics.median(cold_v),
                "warm_ttft_s": statistics.median(warm_v),
                "cold_samples_s": cold_v,
                "warm_samples_s": warm_v,
            }
        stats = engine.stats()
        result["native"]["engine"] = {
            "prefix_hit_rate": stats.prefix_hit_rate,
            "num_blocks": stats.num_blocks,
            "preemptions": stats.preemptions_total,
        }
        await engine.shutdown()
        offline_prompts = make_prompts(args.requests_c32, args.min_prompt, args.max_prompt, vocab, args.seed + 5000)
        result["native"]["offline_c32"] = offline_throughput(llm, offline_prompts, 32, "offline")
        return result
    finally:
        await engine.shutdown()
        if vllm_client:
            await vllm_client.__aexit__(None, None, None)


# ---- report ------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def render(results: dict) -> str:
    native, hf, vllm = results["native"], results.get("transformers"), results.get("vllm")
    lines = [
        "| workload | native tok/s | transformers tok/s | vLLM tok/s | native/transformers | native/vLLM |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in (("c1", "concurrency 1"), ("c32", "concurrency 32")):
        n = native[key]["tok_s"]
        h = hf[key]["tok_s"] if hf else None
        v = vllm[key]["tok_s"] if vllm else None
        lines.append(f"| {label} | {n:.0f} | {h:.0f} | " if h else f"| {label} | {n:.0f} | n/a | ")
        lines[-1] += (f"{v:.0f} | " if v else "n/a | ") + f"{ratio(n, h)} | {ratio(n, v)} |"
    p = native["prefix"]
    lines += [
        "",
        "| shared prefix (1,000-token system prompt) | cold TTFT | warm TTFT | cold/warm |",
        "|---|---|---|---|",
        f"| native | {p['cold_ttft_s'] * 1000:.1f} ms | {p['warm_ttft_s'] * 1000:.1f} ms | "
        f"{ratio(p['cold_ttft_s'], p['warm_ttft_s'])} |",
    ]
    if vllm:
        q = vllm["prefix"]
        lines.append(
            f"| vLLM | {q['cold_ttft_s'] * 1000:.1f} ms | {q['warm_ttft_s'] * 1000:.1f} ms | "
            f"{ratio(q['cold_ttft_s'], q['warm_ttft_s'])} |"
        )
    lines += [
        "",
        "Targets: native >= 5x transformers, >= 1.0x vLLM at concurrency 32, warm TTFT >= 5x lower than cold.",
    ]
    lines.append(
        f"Native step loop driven directly (LLMEngine, no thread/asyncio) at concurrency 32: "
        f"{native['offline_c32']['tok_s']:.0f} tok/s."
    )
    for note in results["notes"]:
        lines.append(f"- {note}")
    return "\n".join(lines)


def start_vllm(args: argparse.Namespace, model_dir: str, notes: list[str], stack: ExitStack) -> str | None:
    """The URL of a vLLM server that `stack` stops, or None (with the reason in
    `notes`) when vLLM is skipped or fails to start: the native figures stand alone."""
    if args.no_vllm:
        notes.append("vLLM: skipped (--no-vllm)")
        return None
    check = vllm_available()
    if not check.available:
        notes.append(f"vLLM: skipped: {check.reason}")
        return None
    print("starting the vLLM CPU server ...", flush=True)
    server = vllm_server(model_dir, Path(tempfile.mkdtemp(prefix="vllm-bench-")))
    try:
        return stack.enter_context(server).base_url
    except ChildFailed as exc:
        print(exc, file=sys.stderr)
        notes.append(f"vLLM: failed to start: {str(exc).splitlines()[0]} (log: {server.log_path})")
        return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    notes: list[str] = []
    model_dir = args.model_dir
    tmp = None
    if model_dir is None:
        from engine.make_tiny import make_tiny

        tmp = tempfile.mkdtemp(prefix="engine-bench-")
        model_dir = str(make_tiny(Path(tmp) / "tiny"))
    with open(Path(model_dir) / "config.json") as f:
        cfg = json.load(f)
    vocab = cfg["vocab_size"]
    notes.append(
        f"model: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} KV heads, vocab {vocab}, fp32"
    )
    notes.append(
        f"prompts: {args.min_prompt}-{args.max_prompt} random token ids, {OUTPUT_TOKENS} output tokens, "
        f"ignore_eos, greedy; c1 = {args.requests_c1} requests, c32 = {args.requests_c32} requests; "
        f"best of {args.rounds} interleaved rounds (all rounds in the JSON)"
    )
    notes.append(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
        f"load average at start {os.getloadavg()[0]:.1f} (other processes share these cores)"
    )
    results: dict = {
        "command": "python -m bench.engine_bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "notes": notes,
    }
    with ExitStack() as stack:
        vllm_url = start_vllm(args, model_dir, notes, stack)
        print(f"native engine{' and vLLM' if vllm_url else ''}, {args.rounds} interleaved rounds ...", flush=True)
        both = asyncio.run(run_native_and_vllm(model_dir, args, vocab, vllm_url))
    results.update(both)
    if vllm_url:
        notes.append(
            "vLLM: 0.32.0 CPU server over HTTP (streaming /v1/completions with token-id prompts); "
            "native: AsyncEngine in process (no HTTP)"
        )
    if not args.no_transformers:
        print("transformers generate() ...", flush=True)
        c1 = make_prompts(args.requests_c1, args.min_prompt, args.max_prompt, vocab, args.seed + 1)
        c32 = make_prompts(args.requests_c32, args.min_prompt, args.max_prompt, vocab, args.seed + 32)
        results["transformers"] = run_transformers(model_dir, c1, c32)
    notes.append(f"load average at end {os.getloadavg()[0]:.1f}")
    table = render(results)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "engine_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "engine_bench.md").write_text(f"# Engine benchmark\n\nCommand: `{results['command']}`\n\n{table}\n")
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
