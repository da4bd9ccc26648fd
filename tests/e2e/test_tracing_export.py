"""Traces leave a real gateway process over OTLP/HTTP: a gateway configured only by
the standard OTEL_* environment exports a request's spans to a small OTLP receiver
started here, continuing the client's trace, and the runtime (a vLLM simulator
recording headers) received the same trace id from the attempt's span."""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from simulators.testing import start_in_process
from tests.procs import start_gateway

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


class OtlpReceiver:
    """POST /v1/traces (protobuf, plain or gzip) on a free loopback port; keeps every
    span with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Span]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                export = ExportTraceServiceRequest.FromString(body)
                receiver.paths.append(self.path)
                for resource_spans in export.resource_spans:
                    resource = attributes(resource_spans.resource.attributes)
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend((resource, span) for span in scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait_for(self, name: str, timeout: float = 15.0) -> Span:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, span in list(self.spans):
                if span.name == name:
                    return span
            time.sleep(0.05)
        raise AssertionError(f"no span {name!r} received; got {[s.name for _, s in self.spans]}")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in v.array_value.values]
    return getattr(v, kind)


def attributes(pairs) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in pairs}


@pytest.fixture
def receiver():
    r = OtlpReceiver()
    yield r
    r.stop()


def test_a_gateway_process_exports_the_trace_the_runtime_continues(tmp_path, receiver):
    with start_in_process("vllm", health_latency=0.0) as sim:
        config = {
            "models": {
                "m": {"backends": [{"name": "v1", "adapter": "vllm", "url": sim.url, "served_model": "sim-model"}]}
            }
        }
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": "switchyard-e2e",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        gateway = start_gateway(tmp_path, config, env=env)
        try:
            client = openai.OpenAI(
                base_url=gateway.url + "/v1",
                api_key="none",
                max_retries=0,
                default_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"},
            )
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            root = receiver.wait_for("chat m")
            attempt = receiver.wait_for("chat sim-model")
            (generation,) = [r for r in sim.stats()["last_requests"] if r["path"] == "/v1/chat/completions"]
        finally:
            gateway.stop()

    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    resource = next(res for res, span in receiver.spans if span.name == "chat m")
    assert resource["service.name"] == "switchyard-e2e"
    assert root.kind == Span.SPAN_KIND_SERVER and attempt.kind == Span.SPAN_KIND_CLIENT
    assert root.trace_id.hex() == attempt.trace_id.hex() == CLIENT_TRACE
    assert root.parent_span_id.hex() == CLIENT_SPAN and attempt.parent_span_id == root.span_id
    attrs = attributes(root.attributes)
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.response.id"] == answer.id
    assert attrs["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens
    assert attributes(attempt.attributes)["gen_ai.provider.name"] == "vllm"
    _, trace_id, parent_id, _ = generation["headers"]["traceparent"].split("-")
    assert (trace_id, parent_id) == (CLIENT_TRACE, attempt.span_id.hex())
