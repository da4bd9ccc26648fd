"""Model pools routing by a scoring profile, built from config: the profile chosen,
the views filled (prefix indexes, sessions, ejection, KV-event feeds), and what a
choice leaves behind. No runtime is contacted."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from adapters.base import GenerationRequest, LoadSnapshot
from adapters.kv_events import decode_payload
from adapters.kv_events_zmq import KVEventSubscriber
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import ConfigError, parse_config
from gateway.openai.requests import estimate_prompt_tokens, parse_chat, parse_completion
from policies.ejection import FailureKind
from policies.profiles import PROFILES

RECORDING = Path(__file__).parents[2] / "policies" / "data" / "vllm-0.32-kv-events.json"
SYSTEM = "You are a support agent for a hardware shop. Be brief and precise. " * 6


def backend(name: str, adapter: str = "vllm", **kw) -> dict:
    return {"name": name, "adapter": adapter, "url": "http://127.0.0.1:9", **kw}


@pytest.fixture
async def sets():
    """BackendSets built by a test, closed after it."""
    made: list[BackendSet] = []
    yield made
    for bs in made:
        await bs.aclose()


@pytest.fixture
def pool_of(sets):
    def build(routing=None, n: int = 3, **model):
        cfg = {"backends": [backend(f"b{i}") for i in range(n)], **model}
        if routing is not None:
            cfg["routing"] = routing
        sets.append(BackendSet(parse_config({"models": {"m": cfg}})))
        return sets[-1].pools["m"]

    return build


def chat(question: str, **session) -> GenerationRequest:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return GenerationRequest("r", "m", messages=messages, tenant="t", session_keys=session)


async def test_routing_names_a_policy_a_named_profile_or_an_explicit_one(pool_of):
    pool = pool_of("least_loaded")
    assert pool.profile is PROFILES["least_loaded"] and pool.profile.picker == "least_loaded"
    pool = pool_of()  # no routing: round robin, as before
    assert pool.profile is PROFILES["round_robin"] and pool.profile.scorers == {}
    pool = pool_of("blended")
    assert pool.profile.scorers == {"prefix": 3, "queue": 2, "kv": 2, "inflight": 2, "session": 10}
    assert (pool.profile.picker, pool.profile.load_factor) == ("max_score", 1.25)
    pool = pool_of("precise")  # for runtimes publishing KV events: the prefix dominates, a looser bound
    assert pool.profile.scorers == {"prefix": 6, "queue": 2, "kv": 2, "inflight": 2, "backlog": 6, "session": 19}
    assert (pool.profile.load_factor, pool.profile.load_floor) == (2.0, 4)
    pool = pool_of({"scorers": {"queue": 1, "prefix": 4}, "load_factor": 1.5})
    assert pool.profile.scorers == {"queue": 1, "prefix": 4} and pool.profile.load_factor == 1.5
    assert pool.profile.load_floor == 1
    assert pool_of({"scorers": {"queue": 1}, "load_floor": 3}).profile.load_floor == 3
    with pytest.raises(ConfigError):
        pool_of({"scorers": {"queue": 1}, "load_floor": 0})
    with pytest.raises(ConfigError, match="unknown scorers"):
        pool_of({"scorers": {"latency": 1}})
    with pytest.raises(ConfigError, match="at least one must be positive"):
        pool_of({"scorers": {"queue": 0}})


def pool_config(**kw):
    return parse_config({"models": {"m": {"backends": [backend("b0", **kw)]}}})


def test_kv_events_config_is_checked_per_runtime():
    assert pool_config(kv_events={"endpoint": "tcp://10.0.0.5:5557"}).models["m"].backends[0].kv_events.hash == "sha256"
    with pytest.raises(ConfigError, match="needs the endpoint vllm publishes on"):
        pool_config(kv_events={})
    with pytest.raises(ConfigError, match="no KV events"):
        parse_config({"models": {"m": {"backends": [backend("t", "tgi", kv_events={"endpoint": "tcp://x:1"})]}}})
    with pytest.raises(ConfigError, match="in process"):
        parse_config(
            {
                "models": {
                    "m": {
                        "backends": [
                            {
                                "name": "n",
                                "adapter": "native",
                                "model_path": "builtin:tiny",
                                "kv_events": {"endpoint": "tcp://x:1"},
                            }
                        ]
                    }
                }
            }
        )


async def test_a_prompt_sharing_a_prefix_follows_it(pool_of):
    pool = pool_of("blended", n=4)
    owner = pool.route(chat("Do you sell soldering irons?")).candidates[0].name
    others = [b.name for b in pool.backends if b.name != owner]
    assert len(pool.prefixes[owner]) > 0 and all(len(pool.prefixes[o]) == 0 for o in others)
    results = [pool.route(chat(f"Question {i} about cables?")) for i in range(5)]
    assert all(r.candidates[0].name == owner for r in results)
    # The shared system prompt fills every full block of these short prompts.
    assert all([b.prefix_approx for b in r.candidates] == [1.0, 0.0, 0.0, 0.0] for r in results)


async def test_a_session_stays_on_its_backend_until_it_is_saturated(pool_of):
    pool = pool_of("blended", n=4, session_affinity={"sources": ["prompt_cache_key"]})
    home = pool.route(chat("hello", prompt_cache_key="conv-1")).candidates[0].name
    by_name = {b.name: b for b in pool.backends}
    by_name[home].inflight = 3  # busier than the others, still not saturated: it keeps the conversation
    assert pool.route(chat("a different question", prompt_cache_key="conv-1")).candidates[0].name == home
    by_name[home].load = LoadSnapshot(waiting=7)  # saturated: the conversation moves, and stays moved
    moved = pool.route(chat("third", prompt_cache_key="conv-1")).candidates[0].name
    assert moved != home
    by_name[home].load = None
    assert pool.route(chat("fourth", prompt_cache_key="conv-1")).candidates[0].name == moved
    # A key the model does not use names no session.
    pool.route(chat("x", user="alice"))
    assert pool.sessions.owner("t\x00alice", time.monotonic()) is None and len(pool.sessions) == 1


async def test_an_ejected_backend_is_left_out(pool_of):
    pool = pool_of("blended", n=2, ejection={"consecutive_failures": 2, "base_ejection_s": 60})
    for _ in range(2):
        pool.ejection.record_failure("b0", FailureKind.CONNECT)
    assert [b.name for b in pool.route(chat("x")).candidates] == ["b1"]
    plain = pool_of("round_robin", n=2, ejection={"consecutive_failures": 1})
    plain.ejection.record_failure("b1", FailureKind.SERVER_ERROR)
    assert [[b.name for b in plain.route(chat("x")).candidates] for _ in range(2)] == [["b0"], ["b0"]]


async def test_a_vllm_backends_events_steer_a_token_id_prompt_to_it(sets):
    rec = json.loads(RECORDING.read_text())
    config = {
        "routing": {"scorers": {"prefix": 3}},
        "backends": [
            backend("cold", kv_events={"endpoint": "tcp://127.0.0.1:1", "block_size": rec["block_size"]}),
            backend("warm", kv_events={"endpoint": "tcp://127.0.0.1:2"}),
        ],
    }
    sets.append(BackendSet(parse_config({"models": {"m": config}})))
    pool = sets[-1].pools["m"]
    assert all(isinstance(f.subscriber, KVEventSubscriber) for f in pool.feeds.values())
    for seq, frame in enumerate(rec["frames"]):
        pool.feeds["warm"].index.receive(seq, decode_payload(bytes.fromhex(frame[2])))
    prompt = rec["prompts"]["b"]
    result = pool.route(GenerationRequest("r", "m", kind="completion", prompt=prompt))
    assert [b.name for b in result.candidates] == ["warm", "cold"]
    assert [b.prefix_precise for b in result.candidates] == [1.0, 0.0]
    # What each would compute (dispatch puts it on the backend's prefill backlog): the
    # warm one only the prompt's last partial block, the cold one all of it.
    assert [b.prefill_tokens for b in result.candidates] == [len(prompt) % rec["block_size"], len(prompt)]
    # Text cannot be named in vLLM's hashes without its tokenizer: the approximate index stands in.
    text = pool.route(GenerationRequest("r", "m", kind="completion", prompt="some text"))
    assert all(b.prefix_precise is None for b in text.candidates)


async def test_the_subscribers_start_and_stop_with_the_backend_set():
    config = {"backends": [backend("v", kv_events={"endpoint": "tcp://127.0.0.1:9"})]}
    bs = BackendSet(parse_config({"models": {"m": config}}))
    await bs.start()
    sub = bs.feeds["v"].subscriber
    assert sub is not None and sub._task is not None and not sub._task.done()
    await bs.aclose()
    assert sub._task is None


def test_the_session_keys_come_from_the_body():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "alice", "prompt_cache_key": "c1"}
    assert parse_chat(body, "r").session_keys == {"user": "alice", "prompt_cache_key": "c1"}
    completions = parse_completion({"model": "m", "prompt": ["a", "b"], "user": "bob"}, "r")
    assert [r.session_keys for r in completions] == [{"user": "bob"}, {"user": "bob"}]
    assert (
        parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": ""}, "r").session_keys == {}
    )


async def test_native_engines_events_steer_a_chat_to_the_engine_holding_its_prefix(sets, tiny_model_dir):
    # Three engines (a served_model each) in one gateway; none has cached anything yet. The events
    # alone: a routed request's expected blocks (tests/gateway/backends/test_routing_expected.py) left out.
    backends = [
        {"name": f"n{i}", "adapter": "native", "model_path": str(tiny_model_dir), "served_model": f"tiny-{i}"}
        | {"kv_events": {"expect_ttl_s": 0}}
        for i in range(3)
    ]
    profile = {"scorers": {"prefix_precise": 3, "inflight": 2}}
    sets.append(BackendSet(parse_config({"models": {"m": {"routing": profile, "backends": backends}}})))
    bs = sets[-1]
    assert len({id(b.adapter) for b in bs.backends.values()}) == 3 and sorted(bs.feeds) == ["n0", "n1", "n2"]
    pool = bs.pools["m"]
    # Not loaded yet: no engine to name the blocks with, the scorer has no signal.
    assert all(b.prefix_precise is None for b in pool.route(chat("Do you sell fuses?")).candidates)
    for b in bs.backends.values():
        await b.adapter.start()
    # Loaded and empty: every engine holds none of it (0, not "unknown", which would score like a hit).
    assert [b.prefix_precise for b in pool.route(chat("Do you sell fuses?")).candidates] == [0.0, 0.0, 0.0]
    first = chat("Do you sell fuses?")
    first.sampling.max_tokens = 2
    async for _ in bs.backends["n1"].adapter.generate(first):
        pass
    # One model, one block size: the three engines name blocks alike, so a decision names them once.
    named: list[str] = []
    for b in bs.backends.values():
        adapter, own = b.adapter, b.adapter.kv_block_hashes
        adapter.kv_block_hashes = lambda req, own=own, name=b.name: named.append(name) or own(req)
    result = pool.route(chat("And soldering irons?"))
    assert result.candidates[0].name == "n1" and result.candidates[0].prefix_precise > 0.5
    assert [b.prefix_precise for b in result.candidates[1:]] == [0.0, 0.0]
    assert len(named) == 1


async def test_native_engines_of_other_block_sizes_do_not_share_block_names(sets, tiny_model_dir):
    backends = [
        {"name": f"n{bs}", "adapter": "native", "model_path": str(tiny_model_dir), "served_model": f"t{bs}"}
        | {"options": {"block_size": bs}}
        for bs in (16, 32)
    ]
    profile = {"scorers": {"prefix_precise": 1}}
    sets.append(BackendSet(parse_config({"models": {"m": {"routing": profile, "backends": backends}}})))
    feeds = sets[-1].feeds
    assert feeds["n16"].scheme != feeds["n32"].scheme


async def test_the_views_carry_each_backends_backlog_and_precise_sends_a_cold_prompt_past_a_long_one(pool_of):
    pool = pool_of("precise")
    pool.backends[0].backlog = 5000  # several cold prompts sent there, none answered yet
    for i in range(12):
        routed = pool.route(chat(f"Question {i} about cables?"))
        assert {v.name: v.backlog_tokens for v in routed.candidates}["b0"] == 5000
        assert routed.candidates[0].name != "b0"
    plain = pool_of("round_robin")
    plain.backends[1].backlog = 7
    routed = plain.route(chat("x"))
    assert {v.name: v.backlog_tokens for v in routed.candidates} == {"b0": 0, "b1": 7, "b2": 0}
    assert {v.prefill_tokens for v in routed.candidates} == {estimate_prompt_tokens(chat("x"))}
