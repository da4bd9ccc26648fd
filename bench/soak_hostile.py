"""The soak's hostile tenant (bench/soak.py): closed-loop clients sending the second
adversity round's attacks (issue 25) beside the other tenants' traffic, each answer
recorded as an `Answer` of tenant `hostile`:

- `poison`: chats whose prompt makes every runtime answer 500 for that request only
  (`[[sim:status=500]]`): they must eject no backend for the others;
- `emoji`: chats of 1,000 emoji, which a four-characters-a-token estimate underprices;
- `tokenize_huge`: a 3.5 MB prompt to `/tokenize` on the native model, once a second
  (refused by its bytes, never tokenized on the event loop);
- `tokenize_large`: a context-sized text to `/tokenize` (tokenized off the loop);
- `embed_many`: 256-input embeddings on the native model (4 units of concurrency).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson

from bench.soak_load import Answer, Load

NAME = "hostile"
KEY = "sk-soak-hostile"
LIMITS = {"requests_per_minute": 100_000, "tokens_per_minute": 200_000, "max_concurrent": 8}
EMOJI = "\U0001f600"


def attacks(model: str, native_model: str) -> list[tuple[str, str, dict, float]]:
    """(name, path, body, pause between sends in seconds)."""
    chat = "/v1/chat/completions"
    return [
        ("poison", chat, {"model": model, "messages": [{"role": "user", "content": "[[sim:status=500]] x"}]}, 0.05),
        ("emoji", chat, {"model": model, "messages": [{"role": "user", "content": EMOJI * 1000}]}, 0.2),
        ("tokenize_huge", "/tokenize", {"model": native_model, "prompt": "x" * 3_500_000}, 1.0),
        ("tokenize_large", "/tokenize", {"model": native_model, "prompt": "hello world " * 5_000}, 0.2),
        ("embed_many", "/v1/embeddings", {"model": native_model, "input": ["a short text"] * 256}, 0.5),
    ]


class Hostile:
    def __init__(self, base_url: str, load: Load, model: str, native_model: str) -> None:
        self.base_url = base_url
        self.load = load
        self.attacks = attacks(model, native_model)

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
            await asyncio.gather(*(self._worker(session, *attack) for attack in self.attacks))

    async def _worker(self, session: aiohttp.ClientSession, kind: str, path: str, body: dict, pause: float) -> None:
        data = orjson.dumps({**body, "max_tokens": 8} if path.endswith("completions") else body)
        headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
        while self.load.running():
            start = time.monotonic()
            try:
                async with session.post(self.base_url + path, data=data, headers=headers) as resp:
                    await resp.read()
                    outcome = "ok" if resp.status == 200 else str(resp.status)
            except (TimeoutError, aiohttp.ClientError) as exc:
                outcome = f"client_error:{type(exc).__name__}"
            now = time.monotonic()
            self.load.answers.append(Answer(start - self.load.started, NAME, kind, outcome, now - start))
            await asyncio.sleep(pause)
