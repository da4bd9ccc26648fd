"""What the reload, drain and workers tests share: gateway configs in front of
runtime simulators, a gateway process started on a config file that can be
rewritten (or swapped like a Kubernetes ConfigMap), a streaming load that
records which runtime answered each request, and a look at the TCP connections
the gateway holds to a runtime."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import yaml

from policies.api_keys import hash_key
from tests.procs import SWITCHYARD, Process

ADMIN_KEY = "sk-sy-admin-lifecycle-test"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
PROMPT = [{"role": "user", "content": "tell me about railway switchyards"}]


def sim_config(sim, kind: str, **top) -> dict:
    """Model "m" served by one simulator, an admin key, and whatever else `top` sets."""
    backend = {"name": f"{kind}-backend", "adapter": kind, "url": sim.url, "served_model": "sim-model"}
    return {
        "admin": {"api_keys": [{"sha256": hash_key(ADMIN_KEY), "name": "test-admin"}]},
        "models": {"m": {"backends": [backend]}},
        **top,
    }


class ConfigFile:
    """A gateway config file laid out as Kubernetes mounts a ConfigMap: `config.yaml`
    is a symlink to `..data/config.yaml`, `..data` a symlink to a timestamped
    directory; an update writes a new directory and swaps `..data` atomically."""

    def __init__(self, root: Path, config: dict) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.generation = 0
        self._write(config)
        os.symlink("..data/config.yaml", self.path)

    @property
    def path(self) -> Path:
        return self.root / "config.yaml"

    def _write(self, config: dict | str) -> None:
        self.generation += 1
        target = self.root / f"..2026_{self.generation:04d}"
        target.mkdir()
        (target / "config.yaml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))
        link = self.root / "..data_tmp"
        os.symlink(target.name, link)
        os.replace(link, self.root / "..data")

    def swap(self, config: dict | str) -> None:
        self._write(config)


def start_on_file(tmp: Path, config_file: ConfigFile, port: int, *args: str) -> Process:
    gw = Process(
        [*SWITCHYARD, "serve", "--config", str(config_file.path), *args],
        f"http://127.0.0.1:{port}",
        tmp / f"gateway-{port}.log",
    )
    return gw.wait_ready("/readyz")


def admin_config(gw: Process) -> dict:
    r = httpx.get(gw.url + "/admin/config", headers=ADMIN, timeout=10)
    r.raise_for_status()
    return r.json()


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(interval_s)


def established_to(port: int) -> int:
    """TCP connections this machine has open to 127.0.0.1:`port` (their client ends)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01":  # 01: ESTABLISHED
                count += 1
    return count


def runtime_texts(sims: dict[str, object]) -> dict[str, str]:
    """The text each simulator writes for PROMPT (each has its own seed): which runtime
    answered a request through the gateway is read from its text."""
    texts = {}
    for kind, sim in sims.items():
        with openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0) as client:
            texts[kind] = client.chat.completions.create(model="sim-model", messages=PROMPT).choices[0].message.content
    assert len(set(texts.values())) == len(texts), "the simulators must write different texts"
    return texts


@dataclass
class Answer:
    started: float  # time.monotonic() when the request was sent
    text: str = ""
    finish: str | None = None
    error: str | None = None


class StreamLoad:
    """`clients` streaming clients (the official SDK, no retries), each sending one
    request after another to model "m" until `stop()`."""

    def __init__(self, url: str, clients: int) -> None:
        self.client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)
        self.clients = clients
        self.answers: list[Answer] = []
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._client()) for _ in range(self.clients)]

    async def stop(self) -> list[Answer]:
        self._stopping.set()
        await asyncio.gather(*self._tasks)
        await self.client.close()
        return self.answers

    def done(self, since: float = 0.0) -> int:
        return sum(1 for a in self.answers if a.started > since and (a.finish or a.error))

    async def _client(self) -> None:
        while not self._stopping.is_set():
            answer = Answer(time.monotonic())
            self.answers.append(answer)
            try:
                stream = await self.client.chat.completions.create(model="m", messages=PROMPT, stream=True)
                async for chunk in stream:
                    for choice in chunk.choices:
                        answer.text += choice.delta.content or ""
                        answer.finish = choice.finish_reason or answer.finish
            except Exception as exc:  # recorded: the test says which requests failed and how
                answer.error = f"{type(exc).__name__}: {exc}"

    async def until(self, count: int, since: float, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.done(since) < count:
            assert time.monotonic() < deadline, f"only {self.done(since)} of {count} requests done in {timeout_s} s"
            await asyncio.sleep(0.05)
