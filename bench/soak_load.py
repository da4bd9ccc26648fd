"""The soak's clients (bench/soak.py): closed-loop workers per tenant sending chat
completions over HTTP, streamed and not, some leaving mid-stream, each answer
recorded as an `Answer`."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

import aiohttp
import orjson


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """How one tenant's clients behave. `max_tokens` None: the request sends none."""

    name: str
    key: str
    workers: int
    max_tokens: tuple[int, int] | None = (8, 48)
    stream_share: float = 0.5
    cancel_share: float = 0.15  # of streamed requests: the client leaves after two chunks


@dataclass(frozen=True, slots=True)
class Answer:
    at_s: float  # since the run started
    tenant: str
    kind: str  # "json", "stream" or "cancel"
    outcome: str  # "ok", "cancelled", "stream_error", or the HTTP status
    took_s: float
    completion_tokens: int | None = None  # from a non-streamed answer's usage


class Load:
    def __init__(self, base_url: str, model: str, tenants: list[TenantLoad], seed: int = 7) -> None:
        self.url = base_url + "/v1/chat/completions"
        self.model = model
        self.tenants = tenants
        self.seed = seed
        self.answers: list[Answer] = []
        self.started = time.monotonic()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """Workers finish the request they are sending and send no more."""
        self._stop.set()

    def running(self) -> bool:
        return not self._stop.is_set()

    async def run(self) -> None:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            workers = [
                self._worker(session, tenant, random.Random(f"{self.seed}-{tenant.name}-{i}"))
                for tenant in self.tenants
                for i in range(tenant.workers)
            ]
            await asyncio.gather(*workers)

    async def _worker(self, session: aiohttp.ClientSession, tenant: TenantLoad, rng: random.Random) -> None:
        while not self._stop.is_set():
            stream = rng.random() < tenant.stream_share
            kind = "cancel" if stream and rng.random() < tenant.cancel_share else "stream" if stream else "json"
            body: dict = {
                "model": self.model,
                "messages": [
                    {"role": "user", "content": f"soak {rng.randrange(10**6)} " + "word " * rng.randrange(40)}
                ],
                "stream": stream,
            }
            if stream:
                body["stream_options"] = {"include_usage": True}
            if tenant.max_tokens is not None:
                body["max_tokens"] = rng.randint(*tenant.max_tokens)
            start = time.monotonic()
            try:
                outcome, retry_after, completion = await self._send(session, tenant.key, body, kind)
            except (TimeoutError, aiohttp.ClientError) as exc:
                outcome, retry_after, completion = f"client_error:{type(exc).__name__}", 0.2, None
            now = time.monotonic()
            self.answers.append(Answer(start - self.started, tenant.name, kind, outcome, now - start, completion))
            await asyncio.sleep(max(retry_after, rng.uniform(0.02, 0.2)))

    async def _send(
        self, session: aiohttp.ClientSession, key: str, body: dict, kind: str
    ) -> tuple[str, float, int | None]:
        """The outcome, how long to wait before the next request, and a JSON answer's completion tokens."""
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        async with session.post(self.url, data=orjson.dumps(body), headers=headers) as resp:
            if resp.status != 200:
                await resp.read()
                # Honour Retry-After, but briefly: the soak wants traffic, not politeness.
                return str(resp.status), min(1.0, float(resp.headers.get("retry-after", 0.2))), None
            if kind == "json":
                payload = orjson.loads(await resp.read())
                if not payload.get("choices"):
                    return "bad_body", 0.0, None
                return "ok", 0.0, payload["usage"]["completion_tokens"]
            chunks = 0
            async for line in resp.content:
                if not line.startswith(b"data:"):
                    continue
                if b'"error"' in line:
                    return "stream_error", 0.0, None
                chunks += 1
                if kind == "cancel" and chunks >= 2:
                    resp.close()  # the client leaves mid-stream: the connection is dropped
                    return "cancelled", 0.0, None
            return "ok", 0.0, None
