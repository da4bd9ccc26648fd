"""What a model pool's route leaves behind and says (gateway/backends/pool.py): a lone
backend matches nothing and remembers nothing, the chosen backend of several remembers the
prompt and the session, the one-shot order reads only what the pool knows of each backend
and turns the candidates' own ring, and the debug line names each backend's view."""

from __future__ import annotations

import logging

import pytest

from adapters.base import GenerationRequest
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config
from policies.prefix_index import prompt_blocks

SYSTEM = "You are a support agent for a hardware shop. Be brief and precise. " * 6


def pool(n: int, routing: str = "blended", **model):
    backends = [{"name": f"b{i}", "adapter": "openai", "url": "http://127.0.0.1:9/v1"} for i in range(n)]
    return BackendSet(parse_config({"models": {"m": {"backends": backends, "routing": routing, **model}}})).pools["m"]


def chat(question: str = "where is my order?", **session) -> GenerationRequest:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return GenerationRequest("r", "m", messages=messages, tenant="t", session_keys=session)


def test_a_lone_backend_is_chosen_without_matching_or_remembering_anything():
    one = pool(1)
    result = one.route(chat(user="alice"))
    assert [c.name for c in result.candidates] == ["b0"]
    assert result.candidates[0].prefix_approx is None and not result.candidates[0].session_owner
    assert len(one.prefixes["b0"]) == 0 and len(one.sessions) == 0


def test_the_chosen_backend_of_several_remembers_the_prompt_and_the_session():
    two = pool(2)
    req = chat(user="alice")
    chosen = two.route(req).candidates[0].name
    other = "b1" if chosen == "b0" else "b0"
    blocks = prompt_blocks(req)
    assert blocks and two.prefixes[chosen].match(blocks) == len(blocks) and two.prefixes[other].match(blocks) == 0
    assert len(two.sessions) == 1
    again = two.route(chat("and my invoice?", user="alice"))
    assert again.candidates[0].name == chosen and again.candidates[0].session_owner
    assert [v.session_owner for v in again.candidates if v.name == other] == [False]


def test_without_a_session_the_prompt_orders_the_backends_and_no_session_is_kept():
    two = pool(2, "prefix_affinity")
    first = two.route(chat()).candidates[0].name
    assert two.route(chat()).candidates[0].name == first and len(two.sessions) == 0


@pytest.mark.parametrize("track", ["candidate", None])
def test_the_one_shot_order_reads_the_ejections_and_turns_its_tracks_ring(track):
    three = pool(3, "round_robin")
    three.ejection.admits = lambda name, now=None: name != "b1"  # type: ignore[method-assign]
    result = three.order(chat(), three.backends, track)  # type: ignore[arg-type]
    assert [v.name for v in result.candidates] == ["b0", "b2"]  # the ejected one is left out
    turned, still = (three.candidate_state, three.state) if track else (three.state, three.candidate_state)
    assert turned.turn == 1 and still.turn == 0
    assert len(three.prefixes["b0"]) == 0 and len(three.sessions) == 0  # nothing remembered


def test_the_debug_line_names_the_choice_and_what_each_backend_showed(caplog):
    two = pool(2)
    with caplog.at_level(logging.DEBUG, logger="switchyard.backends"):
        result = two.route(chat(user="bob"))
    [line] = [r.getMessage() for r in caplog.records]
    chosen = result.candidates[0].name
    assert line.startswith(f"route m -> {chosen}: {{")
    for view in result.candidates:
        scores = result.scores.get(view.name)
        assert f"'{view.name}': ({view.inflight}, {view.backlog_tokens}, {view.prefix_approx}, " in line
        assert f"{view.prefix_precise}, {scores})" in line
    caplog.clear()
    two.route(chat(user="bob"))
    assert caplog.records == []  # no debug line unless asked


def test_a_pools_fingerprint_is_ten_hex_characters_after_fp():
    fingerprint = pool(2).fingerprint
    assert fingerprint.startswith("fp_") and len(fingerprint) == 13 and int(fingerprint[3:], 16) >= 0
