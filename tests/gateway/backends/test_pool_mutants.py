"""What gateway/backends/pool.py's first mutation run left open: its backends by name, a
fingerprint that ignores the order of an option's keys, the model's session settings, the
routing key (the session's where there is one, else the prompt's start), which track's
ring a generation turns, the prompt tokens each view says a backend would compute, and
which profiles (and how many backends) read the KV-event feeds."""

from __future__ import annotations

import logging

import pytest

from adapters.base import GenerationRequest, SamplingParams
from gateway.backends.backend_set import BackendSet
from gateway.backends.kv_feeds import KVFeed
from gateway.config.schema import parse_config
from gateway.openai.requests import estimate_prompt_tokens
from policies.kv_index import KVBlockIndex, KVIndexSettings
from policies.pickers import key_digest, rendezvous_score, tie_rank
from policies.routing import prefix_key

SYSTEM = "You are a support agent for a hardware shop. Be brief and precise. " * 6
QUESTIONS = [f"question number {i}: where is order {i * 7919}?" for i in range(12)]


def backend(name: str, track: str = "stable", **options) -> dict:
    return {"name": name, "adapter": "openai", "url": "http://127.0.0.1:9/v1", "track": track, **options}


def pool(n: int, routing: object = "blended", **model):
    backends = [backend(f"b{i}") for i in range(n)]
    return BackendSet(parse_config({"models": {"m": {"backends": backends, "routing": routing, **model}}})).pools["m"]


def chat(question: str = "where is my order?", **session) -> GenerationRequest:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return GenerationRequest("r", "m", messages=messages, tenant="t", session_keys=session)


def test_a_pool_s_backends_by_name_are_its_own():
    three = pool(3)
    assert three.by_name == {"b0": three.backends[0], "b1": three.backends[1], "b2": three.backends[2]}


def test_the_fingerprint_reads_an_option_s_keys_in_any_order_and_changes_with_their_values():
    def fingerprint(options: dict) -> str:
        cfg = {"models": {"m": {"backends": [backend("b0", options=options)]}}}
        return BackendSet(parse_config(cfg)).pools["m"].fingerprint

    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"a": 1, "b": 2}) != fingerprint({"a": 1, "b": 3})
    # an option JSON cannot encode (YAML's !!set) is read as its text, never a failed config load
    assert fingerprint({"ids": {3}}) == fingerprint({"ids": "{3}"}) != fingerprint({"ids": {4}})


def test_the_session_table_keeps_the_model_s_session_settings():
    two = pool(2, session_affinity={"ttl_s": 7})
    assert two.sessions.settings is two.config.session_affinity and two.sessions.settings.ttl_s == 7


def test_a_session_s_first_request_goes_where_its_key_ranks_first_whatever_the_prompt():
    # every fresh pool sees the same tie (no load, nothing cached): the session's key
    # breaks it, so its requests meet on one backend before the session is recorded
    chosen = {pool(2).route(chat(q, **{"x-session-id": "alice"})).candidates[0].name for q in QUESTIONS}
    assert len(chosen) == 1


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_without_a_session_the_prompt_s_start_is_the_affinity_key(kind):
    expected, chosen = [], []
    for q in QUESTIONS:
        if kind == "chat":
            req = chat(q)
        else:
            req = GenerationRequest("r", "m", prompt=q, kind="completion")
        two = pool(2, "prefix_affinity")
        key = prefix_key(req.messages, req.prompt)
        views = [b.view() for b in two.backends]
        expected.append(max(views, key=lambda v: rendezvous_score(key, v)).name)
        chosen.append(two.route(req).candidates[0].name)
    assert chosen == expected and len(set(expected)) == 2  # the prompts spread over both


def test_blended_ties_follow_the_prompt_s_key_without_a_session():
    expected, chosen = [], []
    for q in QUESTIONS:
        req = chat(q)
        digest = key_digest(prefix_key(req.messages, req.prompt))
        expected.append(max(["b0", "b1"], key=lambda name: tie_rank(digest, name)))
        chosen.append(pool(2).route(req).candidates[0].name)
    assert chosen == expected and len(set(expected)) == 2


@pytest.mark.parametrize("track", ["candidate", "stable"])
def test_a_generation_turns_its_own_track_s_ring(track):
    backends = [backend("s0"), backend("s1"), backend("c0", "candidate"), backend("c1", "candidate")]
    cfg = {"models": {"m": {"backends": backends, "routing": "round_robin", "rollout": {}}}}
    four = BackendSet(parse_config(cfg)).pools["m"]
    four.route(chat(), track)
    turned, still = (four.candidate_state, four.state) if track == "candidate" else (four.state, four.candidate_state)
    assert turned.turn == 1 and still.turn == 0


@pytest.mark.parametrize("routing", ["blended", {"scorers": {"prefix_approx": 1.0}}], ids=["blended", "approx"])
def test_a_second_request_of_a_prompt_costs_its_backend_only_the_uncached_tokens(routing):
    two = pool(2, routing)
    req = chat()
    tokens = estimate_prompt_tokens(req)
    first = two.route(req)
    assert {v.prefill_tokens for v in first.candidates} == {tokens}
    chosen = first.candidates[0].name
    again = {v.name: v for v in two.route(chat()).candidates}
    assert again[chosen].prefix_approx == 1.0 and again[chosen].prefill_tokens < tokens
    other = next(name for name in again if name != chosen)
    assert again[other].prefill_tokens == tokens


def feed() -> KVFeed:
    """A feed that names every prompt's blocks [1, 2, 3, 4] and holds none of them."""
    return KVFeed(KVBlockIndex(KVIndexSettings(block_size=2)), lambda req, size: [1, 2, 3, 4], ("s",))


def completion() -> GenerationRequest:
    return GenerationRequest("r", "m", prompt=list(range(8)), kind="completion")


APPROX_ONLY = {"scorers": {"prefix_approx": 1.0}}


@pytest.mark.parametrize(
    ("n", "routing", "reads"), [(2, "precise", True), (2, APPROX_ONLY, False), (1, "precise", False)]
)
def test_only_a_choice_whose_profile_reads_precise_matches_reads_the_kv_feeds(n, routing, reads):
    p = pool(n, routing)
    p.feeds = {b.name: feed() for b in p.backends}
    result = p.route(completion())
    assert {v.prefix_precise for v in result.candidates} == ({0.0} if reads else {None})
    expected = [f for f in p.feeds.values() if f.index.match([1, 2, 3, 4]) > 0]
    assert len(expected) == (1 if reads else 0)  # the choice expects the prompt on one runtime only


def test_a_feed_that_cannot_name_the_prompt_leaves_its_tokens_to_the_prefix_index():
    two = pool(2, "precise")
    two.feeds = {b.name: feed() for b in two.backends}  # a chat's blocks cannot be named by token ids
    for f in two.feeds.values():
        f.hasher = lambda req, size: None
    tokens = estimate_prompt_tokens(chat())
    chosen = two.route(chat()).candidates[0].name
    again = {v.name: v for v in two.route(chat()).candidates}
    assert again[chosen].prefix_precise is None and again[chosen].prefill_tokens < tokens


def test_the_debug_line_of_a_route_without_candidates_says_none(caplog):
    two = pool(2)
    for b in two.backends:
        b.adapter.capabilities = type(b.adapter.capabilities)(logprobs=False)
    req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(logprobs=1))
    with caplog.at_level(logging.DEBUG, logger="switchyard.backends"):
        result = two.route(req)
    assert result.candidates == [] and [r.getMessage().split(":")[0] for r in caplog.records] == ["route m -> None"]
