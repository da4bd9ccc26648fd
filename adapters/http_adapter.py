"""The one adapter for backends reached over HTTP: a transport and a runtime dialect.

`HTTPAdapter(VLLMDialect, name, url, served_model, ...)`: the transport
(adapters/transport.py) carries the bytes and bounds each wait; the dialect
(adapters/dialect.py) writes the runtime's requests and reads its answers, errors,
load and health. The request id sent upstream (`X-Request-Id`) is the gateway's own,
never the client's; a traced request also carries its attempt's W3C `traceparent`.
Closing the event iterator before the answer is complete closes the connection and
sends the runtime's abort calls, if it has any.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import orjson

from adapters import oneshot_wire
from adapters.base import Adapter, ErrorEvent, Event, GenerationRequest, Health, LoadSnapshot
from adapters.dialect import Call, Dialect
from adapters.errors import GatewayError, prompt_param, upstream_failed
from adapters.oneshot import (
    DetokenizeRequest,
    DetokenizeResult,
    EmbeddingRequest,
    EmbeddingResult,
    TokenizeRequest,
    TokenizeResult,
)
from adapters.openai_wire import SSEData
from adapters.transport import READ_ERRORS, Transport

# A dialect class, called with the backend's name, served model and options.
DialectClass = Callable[[str, str | None, Mapping[str, Any] | None], Dialect]


class HTTPAdapter(Adapter):
    def __init__(
        self,
        dialect: DialectClass,
        name: str,
        url: str,
        served_model: str | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        **transport: Any,
    ) -> None:
        """`transport`: the Transport's timeouts and pool size (docs/adapters.md, "Timeouts")."""
        super().__init__(name)
        self.dialect = dialect(name, served_model, options)
        self.capabilities = self.dialect.capabilities
        self.parameters = self.dialect.parameters
        self.runtime = self.dialect.runtime
        self.transport = Transport(name, url, **transport)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        dialect, transport = self.dialect, self.transport
        chat = request.kind == "chat"
        path = dialect.api_prefix + ("/chat/completions" if chat else "/completions")
        body = orjson.dumps(dialect.body(request, request.stream))
        headers = {
            "Content-Type": "application/json",
            "X-Request-Id": request.request_id,
            **dict(request.trace_headers),
        }
        resp = await transport.open(path, body, headers, stream=request.stream)
        completed = False
        try:
            if resp.status >= 400:
                err = dialect.error(resp.status, await transport.read(resp))
                if err.code == "context_length_exceeded":
                    err.param = prompt_param(request.kind)
                raise err
            quirks = dialect.event_filter(request)
            if not request.stream:
                events = dialect.decode_answer(await transport.read(resp), chat)
                if quirks is not None:
                    events = [out for event in events for out in quirks.feed(event)] + quirks.at_done()
                for event in events:
                    yield event
            else:
                # A stream that ends without finishing its choices is the stream guard's concern.
                sse = SSEData()
                chunks = resp.iter_chunks().__aiter__()
                ended = done = False
                try:
                    while not (ended or done):
                        try:
                            datas = sse.feed(await chunks.__anext__())
                        except StopAsyncIteration:
                            datas, ended = sse.end(), True
                        for data in datas:
                            if data.startswith(b"[DONE]"):
                                done = True
                                break
                            for event in dialect.decode_data(data, chat):
                                if quirks is None:
                                    yield event
                                else:
                                    for out in quirks.feed(event):
                                        yield out
                    if done and quirks is not None:
                        for event in quirks.at_done():
                            yield event
                except GatewayError as exc:
                    yield ErrorEvent(exc)
                except READ_ERRORS as exc:
                    yield ErrorEvent(transport.failure(exc, stream=True))
            completed = True
        finally:
            if completed:
                resp.release()
            else:
                resp.close()  # the runtime stops working on a closed connection
                calls = dialect.abort_calls(request) if resp.status < 400 else []
                if calls:
                    transport.abort(calls, dict(request.trace_headers), dialect.abort_hint)

    # ---- one-shot calls (adapters/oneshot.py) ----------------------------------------------

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        if not self.capabilities.embeddings:
            return await super().embed(request)
        try:
            payload = await self._call(self.dialect.embed_call(request), request.request_id)
        except GatewayError as err:
            raise oneshot_wire.embedding_error(err) from None
        return self.dialect.read_embeddings(payload, request)

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        if not self.capabilities.tokenize:
            return await super().tokenize(request)
        render = self.dialect.render_call(request)
        if render is not None:
            request = self.dialect.rendered(request, await self._call(render, request.request_id))
        payload = await self._call(self.dialect.tokenize_call(request), request.request_id)
        return self.dialect.read_tokenize(payload, request)

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResult:
        if not self.capabilities.tokenize:
            return await super().detokenize(request)
        payload = await self._call(self.dialect.detokenize_call(request), request.request_id)
        return self.dialect.read_detokenize(payload, request)

    async def _call(self, call: Call, request_id: str) -> Any:
        """One JSON body out, one JSON answer back within `timeout_s`. Unless the answer
        was read to its end the connection is closed: a cancelled call stops the work."""
        headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
        resp = await self.transport.open(call.path, orjson.dumps(call.body), headers, stream=False)
        try:
            raw = await self.transport.read(resp)
        except BaseException:
            resp.close()
            raise
        resp.release()
        if resp.status >= 400:
            raise self.dialect.error(resp.status, raw)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise upstream_failed(self.name, "its answer was not JSON", internal=repr(raw[:200])) from None

    # ---- health, load, models --------------------------------------------------------------

    async def health(self) -> Health:
        dialect = self.dialect
        path = dialect.health_path
        try:
            status, raw = await self.transport.get(
                path, float(dialect.options.get("health_timeout_s", dialect.health_timeout_s))
            )
        except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
            # Every runtime binds its port only after loading the model.
            return Health(False, f"not accepting connections (loading or down): {exc}")
        except TimeoutError:
            return Health(False, f"{dialect.runtime} {path} did not answer in time")
        except (aiohttp.ClientError, OSError) as exc:
            return Health(False, str(exc) or type(exc).__name__)
        if status == 200:
            await dialect.ready(self.transport)
            return Health(True, "ready")
        detail = raw[:200].decode(errors="replace")
        return Health(False, f"{dialect.runtime} {path} answered HTTP {status}" + (f": {detail}" if detail else ""))

    async def load(self) -> LoadSnapshot:
        return await self.dialect.load(self.transport)

    async def models(self) -> list[str]:
        _, raw = await self.transport.get(self.dialect.api_prefix + "/models")
        payload = orjson.loads(raw)
        return [m["id"] for m in payload.get("data", []) if isinstance(m, dict) and "id" in m]

    async def aclose(self) -> None:
        await self.transport.aclose()
