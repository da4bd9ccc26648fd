"""Token estimates that cannot be gamed (in process: the real request parsers, the real
Protection, a memory store on a scripted clock): what admission reserves bounds what
the runtime will count, so emoji, which cost a token or more each, no longer buy four
times a tenant's tokens per minute."""

from __future__ import annotations

from adapters.base import Usage
from adapters.errors import GatewayError
from gateway.openai.embeddings import parse_embeddings
from gateway.openai.requests import parse_chat
from policies.token_bound import prompt_token_bound
from stores.quota_memory import MemoryQuotaStore
from tests.gateway.protection_kit import config, make, never_gone, principal

LIMIT = 6_000
EMOJI = "\U0001f600"  # 4 bytes of UTF-8; the runtime counted 4 tokens for one


async def test_emoji_chats_and_embeddings_sustain_no_more_than_the_limit():
    """Every second for three minutes tenant a sends a chat of 1,000 emoji and an
    embeddings call of 20 x 1,000 emoji; the runtime charges what the issue measured
    (4,039 and 80,000). Before: the chat reserved about 271 tokens and two were
    admitted each window (8,000 a minute against 6,000), the embeddings call 5,020."""
    clock = [0]
    p = await make(config(tokens_per_minute=LIMIT), local_store=MemoryQuotaStore(clock_ms=lambda: clock[0]))
    who = await principal(p)
    charged = 0
    refused_as_too_large = 0
    for second in range(180):
        clock[0] = second * 1000
        chat = parse_chat(
            {"model": "m", "messages": [{"role": "user", "content": EMOJI * 1000}], "max_tokens": 10}, "c"
        )
        try:
            ticket = await p.admit(who, "m", chat, prompt_token_bound(chat), never_gone)
        except GatewayError as err:
            assert err.status == 429
        else:
            await ticket.release(Usage(4_039, 10))
            charged += 4_049
        emb = parse_embeddings({"model": "m", "input": [EMOJI * 1000] * 20}, "e")
        try:
            ticket = await p.admit(who, "m", emb.requests[0], emb.prompt_estimate, never_gone, choices=1)
        except GatewayError as err:
            refused_as_too_large += err.code == "request_exceeds_tpm_limit"
        else:
            await ticket.release(Usage(80_000, 0))
            charged += 80_000
    assert charged <= 3 * LIMIT
    assert charged >= 2 * 4_049  # the chat still gets through once a window
    assert refused_as_too_large == 180  # 80,000 bytes can never fit 6,000: 400, not a retry loop
    await p.aclose()


def test_the_bound_is_the_utf8_bytes_plus_a_template_allowance():
    chat = parse_chat({"model": "m", "messages": [{"role": "user", "content": EMOJI * 1000}]}, "c")
    assert 4_000 < prompt_token_bound(chat) < 4_100
    ascii_chat = parse_chat({"model": "m", "messages": [{"role": "user", "content": "a" * 1000}]}, "c")
    assert 1_000 < prompt_token_bound(ascii_chat) < 1_100
    assert parse_embeddings({"model": "m", "input": ["é" * 10, "ab"]}, "e").prompt_estimate == 20 + 4 + 2 + 4
    assert parse_embeddings({"model": "m", "input": [[1, 2, 3], [4]]}, "e").prompt_estimate == 4
