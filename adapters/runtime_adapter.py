"""What the four runtime adapters (vLLM, SGLang, TRT-LLM, TGI) share.

Each runtime speaks an OpenAI-compatible dialect with quirks, so each adapter is
an `OpenAIAdapter` whose url is the server root (`http://host:8000`, the API under
`/v1`) plus:

- its name for error messages (`runtime`), its context-length message
  (`context_pattern`) and a per-runtime status rule (`_classify`) for the one
  table of upstream statuses (`runtime_errors`);
- refusals of what the runtime cannot do (`_unsupported`, 400 naming it), and its
  `parameters` table: a sampling parameter it rejects is refused (400 naming the
  runtime) or dropped, as the model's `unsupported_params` says;
- readiness from the runtime's `/health` (connections are refused while any of
  them loads its model) and a helper to read load endpoints with a time stamp.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from adapters import prometheus_text as prom
from adapters.base import Capabilities, GenerationRequest, Health, LoadSnapshot
from adapters.errors import GatewayError, invalid_request
from adapters.openai import OpenAIAdapter


class RuntimeAdapter(OpenAIAdapter):
    api_prefix = "/v1"
    health_path = "/health"
    health_timeout_s = 5.0

    def _capabilities(self, **native: bool) -> Capabilities:
        """The defaults (what an OpenAI-shaped server does) with what this runtime does
        differently; tools can be switched off per model (`options.tools: false`, for
        a server started without a tool parser)."""
        return Capabilities(tools=bool(self.options.get("tools", True)), **native)

    def _unsupported(self, feature: str, param: str | None = None) -> GatewayError:
        return invalid_request(
            f"The backend serving this model runs {self.runtime}, which does not support {feature}.",
            param=param,
            code="unsupported_by_backend",
        )

    def _build_body(self, request: GenerationRequest, stream: bool) -> dict[str, Any]:
        rejected = self.parameters.unsupported(request.sampling)
        if rejected and request.unsupported_params == "reject":
            why = "; ".join(f"{name}: {self.parameters.rejected[name]}" for name in rejected)
            raise self._unsupported(
                f"{', '.join(rejected)} ({why}); the model's `unsupported_params: drop` would drop them",
                rejected[0],
            )
        body = super()._build_body(request, stream)
        for name in rejected:  # dropped, as the model's policy says
            body.pop(name, None)
        return body

    # ---- health and load -------------------------------------------------------

    async def health(self) -> Health:
        timeout = aiohttp.ClientTimeout(total=float(self.options.get("health_timeout_s", self.health_timeout_s)))
        try:
            async with self.session.get(f"{self.base_url}{self.health_path}", timeout=timeout) as resp:
                body = (await resp.read())[:200].decode(errors="replace")
                if resp.status == 200:
                    return Health(True, "ready")
                return Health(
                    False, f"{self.runtime} /health answered HTTP {resp.status}" + (f": {body}" if body else "")
                )
        except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
            # Every runtime binds its port only after loading the model.
            return Health(False, f"not accepting connections (loading or down): {exc}")
        except TimeoutError:
            return Health(False, f"{self.runtime} /health did not answer in time")
        except (aiohttp.ClientError, OSError) as exc:
            return Health(False, str(exc) or type(exc).__name__)

    async def _get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        """GET a path under the server root; connection errors propagate."""
        async with self.session.get(f"{self.base_url}{path}", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status, await resp.read()

    async def _scrape(self, path: str) -> tuple[list[prom.Sample] | None, float | None]:
        """A Prometheus text endpoint's samples and when they were read; (None,
        None) when unreachable, (None, read_at) when it answered an error."""
        try:
            status, raw = await self._get(path)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None, None
        read_at = time.time()
        if status != 200:
            return None, read_at
        return prom.parse(raw.decode(errors="replace")), read_at

    async def _load_from_gauges(
        self, path: str, running: str, waiting: str, kv_usage: str, hit_rate: str
    ) -> LoadSnapshot:
        """Load from a Prometheus endpoint whose gauges say it all: the running and
        waiting counts summed over engines, KV usage and prefix hit rate averaged."""
        samples, read_at = await self._scrape(path)
        if samples is None or read_at is None:
            return LoadSnapshot() if read_at is None else LoadSnapshot(read_at=read_at)
        kv, hits = prom.mean(samples, kv_usage), prom.mean(samples, hit_rate)
        return gauge_snapshot(samples, read_at, running, waiting, kv, hits)


def gauge_snapshot(
    samples: list[prom.Sample],
    read_at: float | None,
    running: str,
    waiting: str,
    kv_usage: float | None,
    prefix_hit_rate: float | None,
) -> LoadSnapshot:
    """A LoadSnapshot from a runtime's running/waiting gauges (summed over engines)."""
    r = prom.total(samples, running)
    w = prom.total(samples, waiting)
    return LoadSnapshot(
        waiting=None if w is None else int(w),
        running=None if r is None else int(r),
        kv_usage=kv_usage,
        prefix_hit_rate=prefix_hit_rate,
        read_at=time.time() if read_at is None else read_at,
    )
