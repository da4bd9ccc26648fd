"""The prose of the `make bench-routing` report (bench/routing_report.py): what each
pool is and how to read it."""

from __future__ import annotations

from typing import Any

# What the precise profile is, why, and how to read the native pool (what the numbers above show).
NATIVE_CAVEAT = (
    "Why blended precise is what it is: each scored decision, logged by the gateway at debug level "
    "(`--native-only --gateway-log-level debug`), showed three causes of its misses, each fixed and pinned by "
    "unit tests. (1) Event lag: an engine announces a block once it has computed it, so requests of a new "
    "prefix arriving during its prefill went elsewhere and computed it again; a routed request's blocks are "
    "now expected on its backend until its events confirm them (or a removal, a clear, a gap or 5 s end "
    "them). (2) The bound: whenever precise routing left a prefix's holder for a cold backend it was the "
    "bounded load, not the scores: at 1.25 with three backends and two in flight, a holder of one is past its "
    "share; at 2 a holder of two of three is; each spill computed the prefix again (TTFT p99 about 350 ms "
    "against about 100 ms without spills, on a quiet machine). The `precise` profile bounds at twice the "
    "share above a floor of 4 in flight, and weighs prefix 6 against queue, KV and in-flight 2 each: a match "
    "the engine's events vouch for wins until its backend nears saturation. (3) A one-block match (the chat "
    "template's head, 1% of a prompt) decided every cold placement on idle backends and sent all of a run's "
    "prompts to one engine; fewer than 4 matched blocks now score nothing, so a new prompt goes by load, "
    "then by the rendezvous hash, as prefix affinity spreads them. "
    "How to read the native pool: its three engines are threads of the gateway process on a 2-core machine "
    "that also runs the load generator (and other work). Two engines busy at once contend for the cores and "
    "the interpreter: a cold prefill next to another engine's work took up to about 470 ms, the same prefill "
    "batched with a hit on one engine about 100 ms. At 1 session/s the TTFT p99 of 30 requests is the "
    "slowest of the two to four cold prefills of a run, so it is decided by which of them happen to coincide "
    "with other work; it moved by 100-300 ms between repeated runs of the same policy here. The hit rate, "
    "the 5 sessions/s tail and goodput are the steadier signal. Against prefix_affinity, whose hit rate it "
    "now matches, blended precise has two costs this pool shows and separate machines would not: it sends a "
    "new prompt to the least loaded engine, which here means two engines busy at once, while the hash "
    "sometimes puts every prompt of a run on one engine (all 450 requests of a longer run), which this "
    "pool rewards; and it names each prompt's blocks as the engine does (chat template, tokenizer, block "
    "hashes: about 1 ms a decision on the event loop the engines' threads share; the engine it picks "
    "now reuses those token ids instead of tokenizing again). On a quiet machine its "
    "TTFT p50 was 1-4 ms above prefix_affinity's in short runs."
)


def modelled_costs(cfg: dict[str, Any]) -> dict[str, float]:
    """The device time the modelled GPU charges: a first turn whose system prompt is cold
    (every prompt token computed), and a turn whose history is cached (the tail: the last
    partial block, the previous answer and the new user message, about one block more than
    the answer and the user message)."""
    label = 16
    cold_tokens = label + cfg["system_tokens"] + cfg["user_tokens"]
    tail_tokens = 8 + cfg["max_tokens"] + cfg["user_tokens"]  # 8: half a block on average
    f, t = cfg["prefill_ms_per_token"], cfg["sim_ttft_ms"]
    return {
        "cold_tokens": cold_tokens,
        "cold_ms": t + f * cold_tokens,
        "hit_tokens": tail_tokens,
        "hit_ms": t + f * tail_tokens,
        "prompt_blocks": (label + cfg["system_tokens"]) // 16,
    }


def modelled_rates(cfg: dict[str, Any]) -> str:
    """Why the rates of the modelled pool are what they are: the device load they put on
    one simulator if every turn hits (the floor), spread evenly or concentrated as prefix
    affinity concentrates the hottest system prompt's sessions on one device."""
    c = modelled_costs(cfg)
    w = [1.0 / (p + 1) ** cfg["zipf_s"] for p in range(cfg["system_prompts"])]
    hot = w[0] / sum(w)
    rates = cfg["sim_rates"]

    def load(rate: float, share: float) -> str:
        return f"{share * rate * cfg['turns'] * c['hit_ms'] / 1000:.2f}"

    per = ", ".join(
        f"{r:g} sessions/s: {load(r, 1 / 3)} spread evenly, {load(r, hot)} on the hottest prompt's device"
        for r in rates
    )
    return (
        f"The rates: device time per second on one simulator if every turn hits ({c['hit_ms']:.0f} ms each, "
        f"{cfg['turns']} turns a session), the floor that misses only add to: {per}. The hottest of "
        f"{cfg['system_prompts']} prompts at Zipf s={cfg['zipf_s']} draws {hot:.0%} of the sessions, and prefix "
        "affinity sends them all to one device (more when another prompt hashes there too). So the light "
        "rate is well under capacity whatever the routing, and the heavy one is near saturation for a "
        "policy that concentrates and within capacity for one that spreads while keeping its hits; a policy "
        "that spreads without regard to the caches pays cold prefills on top (the cache bound is too small "
        "for every prompt and conversation on every device; the evicted blocks are in the table). Rates "
        "were picked by measurement (short runs, bench/routing_bench.py `--out /tmp/...`); higher ones put "
        "the 2-core machine's own work (gateway, load generator) into the tail."
    )


def simulator_pool(cfg: dict[str, Any]) -> str:
    """What the simulators of this run are: the modelled GPUs (and why), or the engine-backed
    or synthetic ones (no KV events)."""
    head = f"{cfg['duration_s']:g} s of arrivals per run, {cfg.get('sim_repeats', 1)} run(s) per policy and rate. "
    if cfg["source"] == "engine":
        return head + (
            "Token source `engine`: each simulator runs the native engine on builtin:tiny, one thread, its own "
            "process. Hit rate from their `/_sim/stats` (the same as `vllm:prefix_cache_*`). They publish no KV "
            "events, so `blended` matches prefixes approximately (what the gateway routed where) and blended "
            "precise has nothing to read: it does not run here."
        )
    if cfg["source"] == "synthetic":
        return head + "Token source `synthetic`: fixed timing, no device model; no KV events, no blended precise."
    c = modelled_costs(cfg)
    return head + (
        "**A modelled pool.** Each simulator is a vLLM simulator with a modelled GPU: its prefills are "
        "serialized in arrival order, each holding the device for "
        f"{cfg['sim_ttft_ms']:g} ms + {cfg['prefill_ms_per_token']:g} ms x the prompt tokens its prefix cache "
        f"does not hold; each output token sleeps {cfg['sim_itl_ms']:g} ms. Nothing computes: the device is "
        "a sleep. Why: routing trades cache hits against queueing on separate devices, and this 2-core "
        "machine cannot give three real engines capacity of their own (the native pool below shares the "
        "cores, so spreading load there buys nothing); three sleeping simulators are three independent "
        "devices whatever the cores do. The timing is a model, not a measurement of any GPU. "
        f"A cold first turn ({c['cold_tokens']:g} tokens: a label block, the system prompt, the user message) "
        f"holds the device about {c['cold_ms']:.0f} ms; a turn whose history is cached only its tail (about "
        f"{c['hit_tokens']:g} tokens), about {c['hit_ms']:.0f} ms. Each simulator's prefix cache is bounded at "
        f"{cfg['gpu_blocks']} blocks of 16 (LRU; a system prompt with its label is {c['prompt_blocks']} "
        "blocks): the prompts fit, not every conversation; older ones are evicted (the table counts the "
        "blocks). The pool is also what `vllm:kv_cache_usage_perc` is relative to (in-flight tokens over it), "
        "and the gateway calls a backend saturated at 0.8 of it: about 8 requests of these sizes in flight "
        "(a pool of 192 blocks made that about 4, and the heavy rate's runs then differed by over a second "
        "of TTFT p99 as saturation marks came and went). Each publishes vLLM's "
        "KV-cache events (BlockStored, BlockRemoved; sha256 block hashes over token ids) over ZMQ, and each "
        "gateway backend subscribes (`kv_events`, block size 16): `blended_precise` (`routing: precise`) reads "
        "what each cache holds; `blended` is the approximate prefix scorer (what the gateway routed where). "
        f"The workload is token ids on `/v1/completions` (the gateway names only id prompts' blocks): "
        f"{cfg['system_prompts']} system prompts of {cfg['system_tokens']} ids, {cfg['turns']}-turn sessions, "
        f"{cfg['user_tokens']} user ids a turn, each turn's prompt the whole conversation so far with a seeded "
        f"answer of {cfg['max_tokens']} ids per earlier turn; each run's prompts start with a block of ids of "
        "its own, so no run finds a cache another warmed (the simulators are not reset). Hit rate from their "
        f"`/_sim/stats` (the same as `vllm:prefix_cache_*`). {modelled_rates(cfg)}"
    )


# How to read the modelled pool's rows: what separates the policies there (mechanisms, not results).
MODELLED_READING = (
    "How to read the modelled pool: a request's TTFT is its wait for its simulator's device plus its own "
    "prefill, so the policies differ in two things only, how many prompt tokens they make a device compute "
    "(the hit rate, and the cold prefills of a system prompt or a conversation on a device that lacks or "
    "evicted it) and how long the queues they build are. Round robin and least loaded spread without regard "
    "to the caches: every device must hold every prompt, which leaves less of the pool for "
    "conversations, and a conversation's next turn usually lands where its history is not. Prefix affinity keeps each prompt on "
    "the device its hash picks: few misses, but the hottest prompt's device queues at the heavy rate, and "
    "a run whose hashes put several prompts on one device (each run's label changes them) queues even at "
    "the light rate. Blended (approximate) scores the prefixes the gateway routed, not what each cache "
    "still holds after evictions; blended precise scores what each simulator's events say it holds, and "
    "its load terms spread the rest. The two differ only where an eviction made the approximate memory "
    "wrong (the gap between their hit rates says how often), so where neither queues they are close. With "
    "a few hundred requests a run, the TTFT p99 of a policy that keeps its hits is set by the few cold "
    "prefills of a system prompt (about the cold-turn cost above) plus whatever queue they meet; goodput "
    "differences of one or two requests a run at the light rate are such a prefill queued behind another."
)

# Why the precise profile weighs the prefill backlog: what this pool measured before and after the scorer.
BACKLOG_WHY = (
    "Why `precise` weighs the prefill backlog (`backlog` 6, policies/profiles.py): where the prefix matches "
    "tie (a prompt no device holds, a system prompt every device holds), the in-flight counts tie too at "
    "light load (a request or so on each device), while one device is computing a cold prompt and another "
    "only a warm turn. Measured on this pool at 5 sessions/s before the scorer: a new prompt went to a device "
    "with about 237 ms of prefill ahead rather than one with 32 ms, and took about 470 ms (one request a run "
    "over the SLO; none with it). Where the matches differ, the request's own prefill is in the sum, so the "
    "holder of a prompt loses it only when the prefill queued there exceeds what the match saves by nearly "
    "the scale (512 tokens, about one cold prefill of a system prompt). At 18 sessions/s, at the start, the "
    "holder of a cold system prompt had two cold prefills queued (1,176 tokens to wait for) while a device "
    "finishing a warm turn would have computed the prompt in 608; the requests that waited (360-450 ms) were "
    "most of the profile's requests over the SLO: 5 a run without the scorer, 6 with a first version that "
    "scored the backlog alone as a ratio at weight 2 (which no backlog could make give up a whole match), 2 "
    "with it (the start's fourth cold prompt, when every device was computing one, and a request routed while "
    "the other devices' nearly finished cold prefills still counted in full: the backlog does not know how "
    "far a prefill has got). `blended` leaves it out: its uncached estimate would rest on the approximate "
    "index and on four characters a token."
)
