"""The admin endpoints: `POST /admin/reload` and `GET /admin/config`, behind an admin
key of their own (`admin.api_keys`; none configured: 404), on the ops listener when
there is one. `/admin/config` shows the config in force through the one redaction rule
(policies/redact.py, by gateway/config/section.py `redacted_dump`); docs/operations.md
says what is masked.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from adapters.errors import GatewayError
from gateway.config.schema import GatewayConfig
from gateway.config.section import redacted_dump
from gateway.http.envelope import error_response, json_response
from gateway.lifecycle.reload import ConfigReloader, ReloadResult
from policies.api_keys import hash_key

log = logging.getLogger("switchyard.admin")

_STATUS = {
    ReloadResult.INVALID: (400, "config_invalid"),
    ReloadResult.REFUSED: (409, "config_needs_restart"),
    ReloadResult.FAILED: (500, "config_not_applied"),
}


def admin_key_name(config: GatewayConfig, headers: dict[str, str]) -> str:
    """The admin key's name (or digest id) the request carries; 404 when the admin
    API is off, 401 without a valid admin key."""
    keys = config.admin.api_keys
    if not keys:
        raise GatewayError(404, "The admin API is off: the config names no admin.api_keys.", code="not_found")
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    credential = token.strip() if scheme.lower() == "bearer" else headers.get("api-key", "").strip()
    if credential:
        digest = hash_key(credential)
        for key in keys:
            if hmac.compare_digest(key.sha256, digest):
                return key.name or digest[:12]
    raise GatewayError(401, "An admin key is needed: send it as 'Authorization: Bearer <key>'.", code="invalid_api_key")


class AdminViews:
    """`fan_out`: in a worker, tells the other workers to reload too (gateway/lifecycle/workers.py)."""

    def __init__(
        self,
        config: Callable[[], GatewayConfig],
        reloader: ConfigReloader,
        worker: dict[str, int] | None = None,
        fan_out: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.reloader = reloader
        self.worker = worker
        self.fan_out = fan_out

    def _admin(self, request: Request) -> str:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]}
        return admin_key_name(self.config(), headers)

    async def reload(self, request: Request) -> Response:
        try:
            who = self._admin(request)
        except GatewayError as err:
            return error_response(err)
        outcome = await self.reloader.reload(f"POST /admin/reload by {who}")
        if outcome.result == ReloadResult.APPLIED and self.fan_out is not None:
            self.fan_out()
        status = _STATUS.get(outcome.result)
        if status is not None:
            return error_response(GatewayError(status[0], outcome.message, code=status[1]))
        body = {"result": outcome.result.value, "message": outcome.message, "version": outcome.version.to_dict()}
        return json_response(body)

    async def show_config(self, request: Request) -> Response:
        try:
            self._admin(request)
        except GatewayError as err:
            return error_response(err)
        body: dict[str, Any] = {
            "version": self.reloader.version.to_dict(),
            "source": self.reloader.source.path,
            "config": redacted(self.reloader.active),
        }
        if self.worker is not None:
            body["worker"] = {**self.worker, "pid": os.getpid()}
        return json_response(body)


def redacted(config: GatewayConfig) -> dict[str, Any]:
    data = redacted_dump(config)
    for entry in data["auth"]["api_keys"] + data["admin"]["api_keys"]:
        entry["sha256"] = entry["sha256"][:12] + "…"
    return data
