"""The routing benchmark's settings (bench/routing_bench.py runs them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.metrics import Slo

# `blended` is the approximate one (what routing remembers), `blended_precise` the `precise`
# profile on what the backends' KV events say they hold: the native engines and the modelled
# simulators publish them; the engine-backed and synthetic simulators do not.
POLICIES = ("round_robin", "least_loaded", "prefix_affinity", "blended", "blended_precise")
NATIVE_POLICIES = POLICIES
UNEVENTED_POLICIES = POLICIES[:-1]  # over simulators that publish no KV events


@dataclass
class RoutingBenchConfig:
    out_dir: Path = Path("docs/bench/routing")
    # The simulators: modelled (a sleep-based GPU each, KV events, token ids; bench/routing_sims.py),
    # engine (the native engine generates, text) or synthetic (fixed timing, text).
    source: str = "modelled"
    duration_s: float = 15.0  # arrivals of one run over the simulators
    # Sessions per second over the simulators: light, near saturation. Modelled: see the report (and
    # docs/bench/routing/README.md) for why these; engine source on 2 cores: 1 and 5.
    sim_rates: tuple[float, ...] = (5.0, 18.0)
    rates: tuple[float, ...] = (1.0, 5.0)  # the native pool's (its engines share 2 cores)
    policies: tuple[str, ...] = POLICIES
    native_policies: tuple[str, ...] = NATIVE_POLICIES  # () leaves the native pool out
    native_duration_s: float = 10.0  # shorter: three engines and the gateway share one process
    system_prompts: int = 4
    zipf_s: float = 1.2
    system_words: int = 450  # about 2,000 tokens of builtin:tiny: prefill is most of TTFT
    turns: int = 3
    # The modelled pool's workload (token ids) and device (bench/routing_sims.py).
    system_tokens: int = 512  # a system prompt: 32 blocks of 16
    user_tokens: int = 40  # a user message
    sim_ttft_ms: float = 10.0  # a prefill's fixed cost
    prefill_ms_per_token: float = 0.4  # and per prompt token the cache does not hold
    sim_itl_ms: float = 5.0  # a decoded token
    # The KV pool per simulator, in blocks of 16: the 4 system prompts (33 blocks each with the label)
    # and some conversations; older conversations are evicted at both rates. 128 thrashed so hard that
    # spreading policies saturated at the light rate. The simulator reports vllm:kv_cache_usage_perc as
    # its in-flight tokens over this pool and the gateway calls a backend saturated at 0.8: at 192 that
    # was about 4 requests in flight, so at the heavy rate routing flipped on saturation marks and the
    # repetitions' p99 differed by over a second; 320 (about 8) leaves that to real load.
    gpu_blocks: int = 320
    max_tokens: int = 8
    load_factor: float = 1.25
    slo: Slo = field(default_factory=lambda: Slo(ttft_ms=300, tpot_ms=50))
    seed: int = 0
    # Runs of each policy per rate, the order rotated each repetition (bench/routing_pool.py):
    # the native pool's TTFT tail is what the comparison is about, and one run of it is noise.
    # 2 of each (was 3 of the native pool, 1 of the simulators): the modelled pool is now the comparison
    # that matters, and the whole bench stays near 10 minutes.
    repeats: int = 2
    sim_repeats: int = 2
    # The native pool alone (no simulators, no hot-prefix or kill run), to compare its
    # policies within minutes; its table is printed and result.json written, no README.
    native_only: bool = False
    log_level: str = "info"  # the gateway's; "debug" logs each scored routing decision
