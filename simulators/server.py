"""The machinery every runtime double shares: the aiohttp app, startup phases,
request bookkeeping, the request skeleton that runs one generation (whole or
streamed), disconnect handling and the `/_sim/*` routes.

A runtime module subclasses `Simulator`, adds its own routes, validates requests its
own way and writes its own wire shapes (a `driver.Reply`); everything here is
runtime-neutral.

Why aiohttp: it is light per request (no validation layer), it exposes the
transport (to cut a connection mid-stream on purpose), and with
`handler_cancellation=True` a client disconnect cancels the handler at once, which
is how the doubles notice aborts.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
from aiohttp import web

from simulators.driver import Outcome, Reply, StreamEnded, collect, pump
from simulators.faults import NO_FAULTS, Faults, faults_for, merge, parse_spec
from simulators.options import SimOptions
from simulators.prefix_cache import PrefixCache
from simulators.promtext import Exposition, Histogram
from simulators.recorder import Recorder
from simulators.request import SimRequest, from_openai_body
from simulators.sim_tokenizer import ModelTokenizer, SimTokenizer, WordTokenizer
from simulators.sources import synthetic_source
from simulators.sse import DONE_FRAME, ClientGone, SSEStream
from simulators.tokens import Generation, SyntheticSource

READY_LINE = "SIMULATOR READY"
JSON_TYPE = "application/json"


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type=JSON_TYPE, headers=headers)


# A runtime's (name, help) for time to first token, time between tokens, end to end.
LatencyFamilies = tuple[tuple[str, str], tuple[str, str], tuple[str, str]]


def prometheus_response(text: str) -> web.Response:
    """Prometheus text exposition format 0.0.4, as every runtime serves it."""
    return web.Response(
        status=200, body=text.encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )


class Simulator:
    """Shared state of one simulator process."""

    kind = "base"
    # Seconds between a client disconnect and the runtime noticing it (docs/runtimes.md §6).
    default_disconnect_abort_delay = 0.0

    def __init__(self, opts: SimOptions, source: Any | None = None) -> None:
        self.opts = opts
        self.recorder = Recorder(self.kind)
        self.source = source or synthetic_source(opts)
        # Scripted output (a tool call's text) always comes from the synthetic source.
        self.synthetic = self.source if isinstance(self.source, SyntheticSource) else synthetic_source(opts)
        self.default_faults = merge(NO_FAULTS, parse_spec(opts.fault)) if opts.fault else NO_FAULTS
        self.prefix_cache = PrefixCache()
        self.generations: dict[str, Generation] = {}
        self.live: dict[str, LiveRequest] = {}
        self.ttft_hist = Histogram()
        self.itl_hist = Histogram()
        self.e2e_hist = Histogram()
        self.created_at = time.time()
        self.ready_at: float | None = None
        delay = opts.disconnect_abort_delay
        self.disconnect_abort_delay = self.default_disconnect_abort_delay if delay is None else delay
        self._bg_tasks: set[asyncio.Task[Any]] = set()
        self.waiting = 0
        self.slots = asyncio.Semaphore(opts.max_num_seqs) if opts.max_num_seqs else None
        self._words = WordTokenizer()

    @property
    def tokenizer(self) -> SimTokenizer:
        """The tokenizer behind the tokenize and embeddings endpoints: the model's with the
        engine source (once loaded), else the synthetic word rule."""
        model = getattr(self.source, "tokenizer", None)
        return ModelTokenizer(model) if model is not None else self._words

    # ---- app ---------------------------------------------------------------

    def make_app(self) -> web.Application:
        middlewares = [self._auth_middleware] if self.opts.api_key else []
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=middlewares)
        app.on_response_prepare.append(self._count_status)
        app.router.add_get("/_sim/stats", self._stats)
        app.router.add_post("/_sim/reset", self._reset)
        self.add_routes(app.router)
        return app

    def add_routes(self, router: web.UrlDispatcher) -> None:
        raise NotImplementedError

    def metrics_response(self, ex: Exposition, latency: LatencyFamilies) -> web.Response:
        """The runtime's Prometheus text: `ex`, then the three latency histograms
        under the runtime's own names and help texts."""
        for (name, help_text), hist in zip(latency, (self.ttft_hist, self.itl_hist, self.e2e_hist)):
            ex.histogram(name, help_text, hist)
        return prometheus_response(ex.text())

    def add_openai_routes(self, router: web.UrlDispatcher) -> None:
        """OpenAI's two generation routes, both served by `openai_endpoint`."""
        router.add_post("/v1/chat/completions", partial(self.openai_endpoint, kind="chat"))
        router.add_post("/v1/completions", partial(self.openai_endpoint, kind="completion"))

    async def openai_endpoint(self, request: web.Request, kind: str) -> web.StreamResponse:
        """A chat (`kind` "chat") or completions request, in the runtime's dialect."""
        raise NotImplementedError

    # ---- API key -------------------------------------------------------------

    def auth_required(self, path: str, method: str) -> bool:
        """Which paths the runtime's API key guards."""
        return not path.startswith("/_sim/")

    def unauthorized(self) -> web.Response:
        return json_response(401, {"error": "Unauthorized"})

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method != "OPTIONS" and self.auth_required(request.path, request.method):
            if request.headers.get("Authorization") != f"Bearer {self.opts.api_key}":
                return self.unauthorized()
        return await handler(request)

    async def _count_status(self, request: web.Request, response: web.StreamResponse) -> None:
        if not request.path.startswith("/_sim/"):
            self.recorder.status(response.status)

    async def _stats(self, request: web.Request) -> web.Response:
        snap = self.recorder.snapshot()
        snap["source"] = getattr(self.source, "name", "synthetic")
        snap["prefix_cache"] = {"queries": self.prefix_cache.queries, "hits": self.prefix_cache.hits}
        return json_response(200, snap)

    async def _reset(self, request: web.Request) -> web.Response:
        self.recorder.reset()
        return json_response(200, {"reset": True})

    # ---- request helpers ---------------------------------------------------

    async def read_body(self, request: web.Request) -> tuple[Any, str | None]:
        """(parsed JSON, None) or (None, why it is not JSON)."""
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self.recorder.received(request.path, raw.decode("utf-8", "replace"), _interesting_headers(request))
            return None, str(exc)
        self.recorder.received(request.path, body, _interesting_headers(request))
        return body, None

    def faults(self, texts: list[str], body: dict[str, Any]) -> Faults:
        return faults_for(self.default_faults, texts, body)

    def sim_request(self, body: dict[str, Any], kind: str, request_id: str, faults: Faults) -> SimRequest:
        """The request as the token source sees it (real tokens with the engine source)."""
        sim = from_openai_body(body, kind, request_id, faults)
        self.retokenize(sim, body.get("tools") if kind == "chat" else None)
        return sim

    def retokenize(self, sim: SimRequest, tools: Any = None) -> None:
        tokenize = getattr(self.source, "tokenize", None)
        if tokenize is not None and sim.faults.prompt_tokens is None:
            tokenize(sim, tools)

    def cached_tokens(self, sim: SimRequest) -> int:
        return self.prefix_cache.lookup_and_insert(sim.prompt_words)

    def start_generation(self, sim: SimRequest, path: str, fixed: list[str] | None = None) -> Generation:
        # Scripted and constrained output always comes from the synthetic source.
        scripted = fixed is not None or sim.constraint is not None
        gen = self.wrap_generation(self.synthetic.generate(sim, fixed) if scripted else self.source.generate(sim), sim)
        if self.slots is not None:
            gen = QueuedGeneration(gen, self)
        sim.generation = gen
        self.generations[sim.request_id] = gen  # by id, for abort endpoints (the latest wins)
        self.recorder.started(sim.request_id, path)
        return gen

    def wrap_generation(self, gen: Generation, sim: SimRequest) -> Generation:
        """A runtime's hook around each generation (the vLLM double's modelled device)."""
        return gen

    def paced(self, sim: SimRequest) -> bool:
        """Whether tokens arrive over time (then frames are flushed one by one)."""
        if getattr(self.source, "name", "") != "synthetic":
            return True
        f = sim.faults
        ttft = f.ttft_ms if f.ttft_ms is not None else self.opts.ttft_ms
        itl = f.itl_ms if f.itl_ms is not None else self.opts.itl_ms
        return ttft > 0 or itl > 0

    def _forget(self, sim: SimRequest) -> None:
        if self.generations.get(sim.request_id) is sim.generation:
            del self.generations[sim.request_id]

    def end_generation(self, sim: SimRequest, outcome: Outcome) -> None:
        self._forget(sim)
        now = time.monotonic()
        completion_tokens = outcome.completion_tokens
        if outcome.first_token_at is not None:
            self.ttft_hist.observe(outcome.first_token_at - outcome.started)
            if completion_tokens > 1:
                self.itl_hist.observe((now - outcome.first_token_at) / (completion_tokens - 1))
        self.e2e_hist.observe(now - outcome.started)
        self.recorder.finished(
            sim.request_id,
            finish=outcome.main_finish,
            prompt_tokens=sim.prompt_tokens,
            completion_tokens=completion_tokens,
        )

    def fail_generation(self, sim: SimRequest) -> None:
        self._forget(sim)
        self.recorder.failed_request(sim.request_id)

    @contextmanager
    def watch_disconnect(self, sim: SimRequest) -> Iterator[None]:
        """Turn a client disconnect (handler cancelled, or a failed write) into a
        recorded abort, after this runtime's detection delay."""
        try:
            yield
        except (asyncio.CancelledError, ClientGone, ConnectionResetError):
            self.on_disconnect(sim)
            raise

    def on_disconnect(self, sim: SimRequest) -> None:
        request_id = sim.request_id
        if sim.generation is not None:
            sim.generation.abort()
            self._forget(sim)
        if request_id not in self.recorder.live or sim.faults.keep_cancelled:
            return  # keep_cancelled: a broken runtime that never frees it (still counted as running)
        delay = self.disconnect_delay_for(request_id)
        if delay <= 0:
            self.recorder.abort(request_id, "disconnect")
        else:
            asyncio.get_running_loop().call_later(delay, self._late_abort, request_id)

    def disconnect_delay_for(self, request_id: str) -> float:
        return self.disconnect_abort_delay

    def _late_abort(self, request_id: str) -> None:
        if request_id in self.recorder.live:
            self.recorder.abort(request_id, "disconnect")

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._bg_tasks.add(task)
        task.add_done_callback(self._bg_tasks.discard)

    # ---- the request skeleton ------------------------------------------------

    async def run_generation(
        self, request: web.Request, sim: SimRequest, reply: Reply, stream: bool, fixed: list[str] | None = None
    ) -> web.StreamResponse:
        """Run one accepted request's generation and answer it with `reply`'s shapes:
        a whole answer, or a stream. `fixed` is a scripted output (a tool call's text)."""
        gen = self.start_generation(sim, request.path, fixed)
        self.live[sim.request_id] = LiveRequest(sim.prompt_tokens, time.monotonic())
        outcome = Outcome(n=max(1, sim.n))
        try:
            with self.watch_disconnect(sim):
                if stream:
                    return await self._stream(request, sim, gen, reply, outcome)
                await collect(gen, outcome)
                failed = reply.failed_answer(request, sim.faults)
                if failed is not None:
                    self.fail_generation(sim)
                    return failed
                self.end_generation(sim, outcome)
                return reply.answer(outcome)
        finally:
            self.live.pop(sim.request_id, None)

    async def _stream(
        self, request: web.Request, sim: SimRequest, gen: Generation, reply: Reply, outcome: Outcome
    ) -> web.StreamResponse:
        stream = SSEStream(request, self.paced(sim), headers=reply.headers)
        if stream.paced:  # the runtimes' streaming responses send their head before any output
            await stream.start()
        try:
            await pump(sim, gen, stream, reply, outcome)
        except StreamEnded:
            self.fail_generation(sim)
            return stream.response
        for data in reply.closing(outcome):
            await stream.send(data)
        if reply.done and not sim.faults.no_done:
            await stream.send(DONE_FRAME)
        self.end_generation(sim, outcome)
        return await stream.finish()

    @property
    def live_tokens(self) -> int:
        """Prompt tokens of the requests being served (the KV-cache load)."""
        return sum(live.prompt_tokens for live in self.live.values())

    # ---- lifecycle hooks ---------------------------------------------------

    async def load(self) -> None:
        """Runs before the port is bound (model loading: connections refused)."""
        loader = getattr(self.source, "load", None)
        if loader is not None:
            await loader()
            # A model's own context window wins over a larger --max-model-len.
            self.opts.max_model_len = min(
                self.opts.max_model_len, getattr(self.source, "max_model_len", self.opts.max_model_len)
            )

    async def on_bound(self) -> None:
        """Runs right after the port is bound."""
        self.ready_at = time.monotonic()

    @property
    def in_flight(self) -> int:
        """Requests accepted and not finished: running plus waiting."""
        return self.recorder.in_flight

    @property
    def running(self) -> int:
        return max(0, self.recorder.in_flight - self.waiting)


@dataclass(slots=True)
class LiveRequest:
    prompt_tokens: int
    started: float  # time.monotonic() when its generation started


class QueuedGeneration(Generation):
    """A generation that first waits for one of `--max-num-seqs` batch slots, so
    load beyond the batch shows up as waiting requests and as queueing delay."""

    def __init__(self, inner: Generation, sim: Simulator) -> None:
        self.inner = inner
        self.sim = sim
        self.prompt_tokens = inner.prompt_tokens

    def abort(self) -> None:
        self.inner.abort()

    async def __aiter__(self) -> Any:  # type: ignore[override]
        slots = self.sim.slots
        assert slots is not None
        self.sim.waiting += 1
        try:
            await slots.acquire()
        finally:
            self.sim.waiting -= 1
        try:
            async for token in self.inner:
                yield token
        finally:
            slots.release()


def _interesting_headers(request: web.Request) -> dict[str, str]:
    keep = ("x-request-id", "authorization", "content-type", "user-agent", "traceparent", "tracestate")
    return {str(k).lower(): v for k, v in request.headers.items() if k.lower() in keep}


async def serve(
    sim: Simulator, stop: asyncio.Event | None = None, on_ready: Callable[[int], None] | None = None
) -> None:
    """Load (connections refused meanwhile), bind, then serve until `stop` is set
    (by default: until SIGTERM/SIGINT)."""
    opts = sim.opts
    if opts.startup_delay > 0:
        await asyncio.sleep(opts.startup_delay)
    await sim.load()
    # A short shutdown timeout: a simulator holds no state worth draining connections for.
    runner = web.AppRunner(sim.make_app(), handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, opts.host, opts.port, backlog=4096, reuse_address=True)
    await site.start()
    port = opts.port
    server = getattr(site, "_server", None)
    if server is not None and server.sockets:
        port = server.sockets[0].getsockname()[1]
    await sim.on_bound()
    if on_ready is not None:
        on_ready(port)
    else:
        print(f"{READY_LINE} {sim.kind} http://{opts.host}:{port}", flush=True)
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run_forever(sim: Simulator) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a gateway dependency
        asyncio.run(serve(sim))
    else:
        if sys.version_info >= (3, 12):
            uvloop.run(serve(sim))
        else:
            uvloop.install()
            asyncio.run(serve(sim))
    return 0
