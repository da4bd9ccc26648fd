"""The modelled simulator pool of `make bench-routing`: its token-id workload
(bench/routing_tokens.py) and the simulators' command lines and gateway backends
(bench/routing_sims.py), in process; the token-id load against a real simulator."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from bench.routing_bench import gateway_config
from bench.routing_config import POLICIES, RoutingBenchConfig
from bench.routing_sims import BACKENDS, BLOCK_SIZE, SimPorts, sim_argv, sim_backends, start_sims
from bench.routing_tokens import LABEL_TOKENS, label_ids, prompts, run_token_load, token_sessions
from gateway.config.schema import parse_config


def test_each_turn_is_the_last_prompt_with_its_answer_then_the_new_user_ids():
    cfg = RoutingBenchConfig(turns=3, system_tokens=64, user_tokens=20, max_tokens=8)
    conv = token_sessions(cfg, "round_robin@5#0", 10)[3]
    turns = prompts(conv)
    assert len(turns) == 3 and all(isinstance(x, int) and 100 <= x < 32000 for t in turns for x in t)
    assert turns[0] == conv["system"] + conv["turns"][0]["user"]
    assert len(conv["system"]) == LABEL_TOKENS + 64
    for k in (1, 2):  # the whole earlier prompt, its answer, the new user message
        assert turns[k] == turns[k - 1] + conv["turns"][k - 1]["answer"] + conv["turns"][k]["user"]
        assert len(turns[k]) == len(turns[k - 1]) + 8 + 20
    assert [len(t["answer"]) for t in conv["turns"]] == [8, 8, 8]  # the turn's output length


def test_every_policy_of_a_rate_gets_the_same_ids_under_a_leading_block_of_its_own():
    cfg = RoutingBenchConfig()
    a = token_sessions(cfg, "prefix_affinity@15#0", 60)
    b = token_sessions(cfg, "blended_precise@15#0", 60)
    assert [c["system_index"] for c in a] == [c["system_index"] for c in b]
    # Zipf over the system prompts: several used, the first the most.
    idx = [c["system_index"] for c in a]
    assert len(set(idx)) > 2 and idx.count(0) == max(idx.count(p) for p in set(idx))
    for x, y in zip(a, b):
        # Only the first block differs: the same prompts, the same cost, but no block hash in common
        # (vLLM chains each block's hash to the one before it).
        assert x["system"][:LABEL_TOKENS] != y["system"][:LABEL_TOKENS]
        assert x["system"][LABEL_TOKENS:] == y["system"][LABEL_TOKENS:] and x["turns"] == y["turns"]
    assert len({tuple(label_ids(f"p@15#{k}")) for k in range(5)}) == 5
    # Sessions of one prompt share its ids; other prompts do not.
    by = {c["system_index"]: c["system"] for c in a}
    assert len({tuple(s) for s in by.values()}) == len(by)
    assert all(c["system"] == by[c["system_index"]] for c in a)
    hot = token_sessions(cfg, "hot", 20, hot=True)
    assert {c["system_index"] for c in hot} == {0}


def test_modelled_simulators_publish_kv_events_that_each_gateway_backend_reads(tmp_path: Path):
    cfg = RoutingBenchConfig(gpu_blocks=77, prefill_ms_per_token=0.3, sim_ttft_ms=12)
    sims, ports = start_sims(cfg, tmp_path)  # not started: only their command lines
    assert set(sims) == set(BACKENDS)
    every = [p for sp in ports.values() for p in (sp.http, sp.pub, sp.replay)]
    assert len(set(every)) == 9  # three sockets each, none shared
    argv = sims["sim1"].argv
    p = ports["sim1"]
    assert argv[argv.index("--num-gpu-blocks-override") + 1] == "77"
    assert argv[argv.index("--prefill-ms-per-token") + 1] == "0.3"
    assert argv[argv.index("--ttft-ms") + 1] == "12" and argv[argv.index("--source") + 1] == "synthetic"
    kv = orjson.loads(argv[argv.index("--kv-events-config") + 1])
    assert kv == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{p.pub}",  # bound, as vLLM binds only a wildcard endpoint
        "replay_endpoint": f"tcp://*:{p.replay}",
        "topic": "",
    }
    data = gateway_config(cfg, sims, 8000, ports)
    config = parse_config(data)  # the gateway's own validation
    assert {m for m in config.models} >= set(POLICIES) | {"hot", "kill"}
    assert config.models["blended_precise"].routing == "precise"
    for b in config.models["blended_precise"].backends:
        assert b.kv_events is not None and b.kv_events.block_size == BLOCK_SIZE
        assert b.kv_events.endpoint == f"tcp://127.0.0.1:{ports[b.name].pub}"
        assert b.kv_events.replay_endpoint == f"tcp://127.0.0.1:{ports[b.name].replay}"


def test_the_engine_backed_simulators_publish_nothing_and_keep_their_text_path():
    cfg = RoutingBenchConfig(source="engine")
    argv = sim_argv(cfg, SimPorts(9001))
    assert "--kv-events-config" not in argv and argv[argv.index("--source") + 1] == "engine"
    backends = sim_backends(cfg, {"sim0": "http://127.0.0.1:9001"}, {})
    assert "kv_events" not in backends[0]


def test_the_token_load_sends_ids_that_the_simulator_counts_as_tokens(tmp_path: Path):
    # A real vLLM simulator (fixed timing): each turn's prompt arrives as ids, its length in tokens.
    cfg = RoutingBenchConfig(source="synthetic", turns=2, system_tokens=48, user_tokens=10, max_tokens=4)
    sims, _ = start_sims(cfg, tmp_path)
    with sims["sim0"] as sim:
        convs = token_sessions(cfg, "t", 3)
        records = asyncio.run(run_token_load(sim.base_url, "sim-model", convs, [0.0, 0.01, 0.02], 4))
    assert len(records) == 6 and all(r.outcome == "ok" for r in records)
    want = {(i, k): len(p) for i, c in enumerate(convs) for k, p in enumerate(prompts(c))}
    assert {(r.session, r.turn): r.usage_prompt_tokens for r in records} == want
    assert all(r.usage_completion_tokens == 4 for r in records)
