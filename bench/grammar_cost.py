"""What grammar-constrained decoding costs (issue 4).

Two measurements, one command (`python -m bench.grammar_cost`):

1. libraries: xgrammar, llguidance and outlines-core on our tokenizers (the tiny
   model's 512 tokens, and a 32k byte-level BPE trained here on the Python standard
   library's sources, the vocabulary size of Llama 2 / Mistral): tokenizer setup,
   grammar compile time and the time of one next-token mask along a valid document.
2. engine: the native engine's step time at batch 1 and 32 with every sequence under
   a JSON-schema grammar versus the same batch unconstrained, on the tiny model and on
   a tiny model with the 32k vocabulary. Overhead = (grammar - plain) / plain; the
   goal is under 10%.

Results are printed and written to reports/grammar/ (grammar_cost.json, grammar_cost.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# A schema with nested objects, arrays, enums, bounded and unbounded scalars, and a
# document valid against it written the way our grammars write JSON (", " and ": ").
SCHEMA: dict = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["street", "city", "zip"],
            "additionalProperties": False,
        },
        "score": {"type": "number"},
    },
    "required": ["name", "age", "role", "tags", "address", "score"],
    "additionalProperties": False,
}
DOCUMENT = json.dumps(
    {
        "name": "Ada Lovelace",
        "age": 36,
        "role": "admin",
        "tags": ["mathematics", "engines", "poetry of science"],
        "address": {"street": "12 St James's Square", "city": "London", "zip": "12345"},
        "score": 99.5,
    }
)
# The engine measurement needs sequences that stay alive for the whole run: an array of
# at least 1000 such objects never completes within the measured steps.
LONG_SCHEMA: dict = {"type": "array", "items": SCHEMA, "minItems": 1000}
WIDE_VOCAB = 32768


# ---- tokenizers --------------------------------------------------------------------------


def wide_model(root: Path) -> Path:
    """A tiny random model whose tokenizer is a real 32k BPE (trained on stdlib sources)."""

    from engine.make_tiny import TinySpec, make_tiny, train_tokenizer

    out = root / "wide"
    if (out / "config.json").is_file():
        return out
    make_tiny(out, spec=TinySpec(vocab=WIDE_VOCAB))
    corpus_dir = Path(sysconfig.get_paths()["stdlib"])
    texts, size = [], 0
    for path in sorted(corpus_dir.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        size += len(text)
        if size > 6_000_000:
            break
    tok = train_tokenizer(WIDE_VOCAB, texts)
    tok.save(str(out / "tokenizer.json"))
    return out


def token_table(model_dir: Path) -> tuple[Any, list[bytes], list[int]]:
    from engine.text.tokenizer import TextTokenizer

    tok = TextTokenizer(model_dir)
    return tok, [tok.token_bytes(i) for i in range(tok.vocab_size)], sorted(tok.eos_token_ids)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def _summary(samples_s: list[float]) -> dict:
    us = sorted(s * 1e6 for s in samples_s)
    return {
        "mean_us": round(statistics.fmean(us), 1),
        "p50_us": round(us[len(us) // 2], 1),
        "p99_us": round(us[min(len(us) - 1, int(len(us) * 0.99))], 1),
        "n": len(us),
    }


# ---- 1. libraries --------------------------------------------------------------------------


def bench_llguidance(tok, token_bytes: list[bytes], eos: list[int], doc_ids: list[int]) -> dict:
    import llguidance

    from engine.structured import grammar_tokenizer
    from engine.structured.grammars import json_grammar
    from engine.structured.schemas import prepare_schema

    lltok, setup = _timed(lambda: grammar_tokenizer(tok, len(token_bytes), set(eos)))
    grammar = json_grammar(prepare_schema(SCHEMA, param="schema"))
    start, compile_s = _timed(lambda: llguidance.LLMatcher(lltok, grammar, log_level=0))

    def walk() -> list[float]:
        matcher = start.deep_copy()
        masks = []
        for t in doc_ids:
            _, s = _timed(matcher.compute_bitmask)
            masks.append(s)
            if not matcher.consume_token(t):
                raise RuntimeError(f"llguidance rejected the document: {matcher.get_error()}")
        return masks

    cold = walk()
    # Copies of a compiled start state share its lexer states: what a request gets from the
    # grammar cache (engine/structured/grammars.py) once one request with the schema ran.
    warm = walk()
    return {
        "setup_s": round(setup, 4),
        "compile_s": round(compile_s, 4),
        "mask": _summary(cold),
        "mask_warm": _summary(warm),
    }


def bench_xgrammar(tok, token_bytes: list[bytes], eos: list[int], doc_ids: list[int]) -> dict:
    import xgrammar

    info, setup = _timed(
        lambda: xgrammar.TokenizerInfo(
            token_bytes, xgrammar.VocabType.RAW, vocab_size=len(token_bytes), stop_token_ids=eos
        )
    )
    compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
    compiled, compile_s = _timed(
        lambda: compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=False, separators=(", ", ": "))
    )
    matcher = xgrammar.GrammarMatcher(compiled)
    bitmask = xgrammar.allocate_token_bitmask(1, len(token_bytes))
    masks = []
    for t in doc_ids:
        _, s = _timed(lambda: matcher.fill_next_token_bitmask(bitmask))
        masks.append(s)
        if not matcher.accept_token(t):
            raise RuntimeError("xgrammar rejected the document")
    return {"setup_s": round(setup, 4), "compile_s": round(compile_s, 4), "mask": _summary(masks)}


def bench_outlines(tok, token_bytes: list[bytes], eos: list[int], doc_ids: list[int]) -> dict:
    import torch
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    def vocabulary() -> Any:
        entries: dict[bytes, list[int]] = {}
        for i, b in enumerate(token_bytes):
            if i not in tok.special_ids and b:
                entries.setdefault(b, []).append(i)
        return Vocabulary(eos[0], entries)

    vocab, setup = _timed(vocabulary)
    regex = build_regex_from_schema(json.dumps(SCHEMA), whitespace_pattern=r"[ ]?")
    index, compile_s = _timed(lambda: Index(regex, vocab))
    guide = Guide(index)
    mask = torch.zeros((len(token_bytes) + 31) // 32, dtype=torch.int32)
    masks = []
    for t in doc_ids:
        _, s = _timed(lambda: guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size()))
        masks.append(s)
        guide.advance(t)
    return {"setup_s": round(setup, 4), "compile_s": round(compile_s, 4), "mask": _summary(masks)}


def compare_libraries(model_dirs: dict[str, Path]) -> dict:
    results: dict = {}
    for label, model_dir in model_dirs.items():
        tok, token_bytes, eos = token_table(model_dir)
        doc_ids = tok.encode(DOCUMENT, add_special_tokens=False)
        row: dict = {"vocab": len(token_bytes), "document_tokens": len(doc_ids)}
        for name, fn in (
            ("llguidance", bench_llguidance),
            ("xgrammar", bench_xgrammar),
            ("outlines-core", bench_outlines),
        ):
            try:
                row[name] = fn(tok, token_bytes, eos, doc_ids)
            except Exception as exc:  # a library missing or failing is a result too
                row[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"  {label:5} {name:14} {json.dumps(row[name])}", flush=True)
        results[label] = row
    return results


# ---- 2. the engine -------------------------------------------------------------------------


def engine_cost(model_dir: Path, batch: int, steps: int, repeats: int) -> dict:
    """Median decode step time with and without a grammar on every sequence."""
    from engine.llm_engine import LLMEngine
    from engine.sampling_params import SamplingParams
    from engine.structured import GrammarMask, grammar_tokenizer, plan_structured
    from engine.text.tokenizer import TextTokenizer

    tok = TextTokenizer(model_dir)
    engine = LLMEngine(str(model_dir), max_num_seqs=max(batch, 1), num_blocks=batch * 8 + 16, max_model_len=256)
    vocab = engine.model_config.vocab_size
    lltok = grammar_tokenizer(tok, vocab, engine.eos_token_ids)
    prompt = tok.encode("Answer in JSON:", add_special_tokens=False)
    response_format = {"type": "json_schema", "json_schema": {"name": "people", "schema": LONG_SCHEMA}}

    hook_s = [0.0]
    starters: dict = {}

    def timed(starter):
        """One timed wrapper per starter, so the engine still calls it once per step."""
        if starter not in starters:

            def run_starter() -> None:
                t0 = time.perf_counter()
                starter()
                hook_s[0] += time.perf_counter() - t0

            starters[starter] = run_starter
        return starters[starter]

    class TimedGrammarMask(GrammarMask):
        """Adds up the time the engine thread spends in the grammar hook (waits included)."""

        def prefetch(self, output_ids):
            t0 = time.perf_counter()
            starter = super().prefetch(output_ids)
            hook_s[0] += time.perf_counter() - t0
            return timed(starter)

        def __call__(self, output_ids):
            t0 = time.perf_counter()
            mask = super().__call__(output_ids)
            hook_s[0] += time.perf_counter() - t0
            return mask

    def run(with_grammar: bool, tag: str) -> tuple[float, float]:
        masks: list[GrammarMask] = []
        for i in range(batch):
            fn = None
            if with_grammar:
                fn = TimedGrammarMask(
                    plan_structured(lltok, response_format=response_format).matcher, vocab, engine.eos_token_ids
                )
                masks.append(fn)
            engine.add_request(
                f"{tag}-{i}",
                prompt,
                SamplingParams(max_tokens=steps + 1, temperature=1.0, seed=i, ignore_eos=True, allowed_tokens_fn=fn),
            )
        engine.step()  # the prefill is not what we measure
        hook_s[0] = 0.0
        times = []
        while engine.has_unfinished_requests():
            t0 = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t0)
        if any(m.errors for m in masks):
            raise RuntimeError(f"grammar errors: {[m.errors for m in masks if m.errors][:1]}")
        return statistics.median(times), hook_s[0] / len(times)

    plain, grammar, hook = [], [], []
    for r in range(repeats):  # interleaved: load drifts on a shared machine
        plain.append(run(False, f"p{r}")[0])
        step_s, hook_per_step = run(True, f"g{r}")
        grammar.append(step_s)
        hook.append(hook_per_step)
    p, g, h = statistics.median(plain), statistics.median(grammar), statistics.median(hook)
    return {
        "batch": batch,
        "steps": steps,
        "repeats": repeats,
        "vocab": vocab,
        "plain_step_ms": round(p * 1e3, 3),
        "grammar_step_ms": round(g * 1e3, 3),
        "overhead_ms_per_token": round((g - p) * 1e3 / batch, 4),
        "overhead_pct": round((g - p) / p * 100, 1),
        "hook_ms_per_step": round(h * 1e3, 3),
        "hook_pct_of_plain_step": round(h / p * 100, 1),
    }


# ---- report ---------------------------------------------------------------------------------


def write_report(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "grammar_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Grammar cost",
        "",
        f"Command: `{result['command']}` (torch threads {result['torch_threads']}, "
        f"background overlap {'on' if result['overlap'] else 'off'})",
        "",
        "## Libraries (one next-token mask)",
        "",
        "| vocab | library | setup s | compile s | mask mean us | p50 us | p99 us |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["libraries"].values():
        for name in ("llguidance", "xgrammar", "outlines-core"):
            r = row[name]
            if "error" in r:
                lines.append(f"| {row['vocab']} | {name} | error: {r['error']} | | | | |")
            else:
                m = r["mask"]
                lines.append(
                    f"| {row['vocab']} | {name} | {r['setup_s']} | {r['compile_s']} | {m['mean_us']} | "
                    f"{m['p50_us']} | {m['p99_us']} |"
                )
                if "mask_warm" in r:
                    w = r["mask_warm"]
                    lines.append(
                        f"| {row['vocab']} | {name} (warm copy) | | | {w['mean_us']} | {w['p50_us']} | {w['p99_us']} |"
                    )
    lines += [
        "",
        "## Engine step (every sequence under a JSON-schema grammar)",
        "",
        "| model vocab | batch | plain step ms | grammar step ms | overhead ms/token | overhead % "
        "| engine-thread hook ms/step | hook % of plain step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["engine"]:
        lines.append(
            f"| {r['vocab']} | {r['batch']} | {r['plain_step_ms']} | {r['grammar_step_ms']} | "
            f"{r['overhead_ms_per_token']} | {r['overhead_pct']} | {r['hook_ms_per_step']} | "
            f"{r['hook_pct_of_plain_step']} |"
        )
    (out / "grammar_cost.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.grammar_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports/grammar")
    ap.add_argument("--steps", type=int, default=32, help="decode steps measured per run")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved plain/grammar runs (median)")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--skip-wide", action="store_true", help="only the tiny model (no 32k tokenizer training)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument(
        "--overlap",
        action="store_true",
        help="compute masks in a background thread during the forward pass (SWITCHYARD_GRAMMAR_OVERLAP=1)",
    )
    args = ap.parse_args(argv)
    from engine.structured.mask_provider import OVERLAP_ENV

    os.environ[OVERLAP_ENV] = "1" if args.overlap else "0"

    import torch

    from engine.make_tiny import make_tiny

    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="grammar-cost-"))
    models = {"tiny": make_tiny(work / "tiny")}
    if not args.skip_wide:
        print("training the 32k tokenizer ...", flush=True)
        models["32k"] = wide_model(work)
    print("libraries (one mask along a valid document):", flush=True)
    libraries = compare_libraries(models)
    print("engine step, plain vs grammar:", flush=True)
    engine_rows = []
    for label, model_dir in models.items():
        for batch in (int(b) for b in args.batches.split(",")):
            row = engine_cost(model_dir, batch, args.steps, args.repeats)
            engine_rows.append(row)
            print(f"  {label:5} {json.dumps(row)}", flush=True)
    result = {
        "command": "python -m bench.grammar_cost " + " ".join(argv if argv is not None else sys.argv[1:]),
        "torch_threads": torch.get_num_threads(),
        "overlap": args.overlap,
        "libraries": libraries,
        "engine": engine_rows,
    }
    write_report(Path(args.out), result)
    print(f"wrote {args.out}/grammar_cost.json and grammar_cost.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
