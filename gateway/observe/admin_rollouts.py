"""The rollout admin endpoints, behind the admin key as the rest of /admin
(gateway/observe/admin.py `admin_key_name`: 404 when the admin API is off, 401 without
an admin key):

    GET  /admin/rollouts                   every configured rollout as this replica knows it
    GET  /admin/rollouts/{model}           state, shares, the last windows' evidence
    POST /admin/rollouts/{model}/{action}  start | pause | resume | promote | abort

A model without a rollout is 404, an unknown action 400, an action the state refuses
409 (the reason says why), the shared store down 503 (traffic keeps its shares).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from adapters.errors import (
    GatewayError,
    rollout_bad_action,
    rollout_not_found,
    rollout_refused,
    rollout_store_unavailable,
)
from gateway.config.schema import GatewayConfig
from gateway.http.envelope import error_response, json_response
from gateway.lifecycle.rollout import RolloutController, UnknownRollout
from gateway.observe.admin import admin_key_name
from policies.rollout_state import ACTIONS, TransitionRefused
from stores.rollout_store import RolloutStoreUnavailable


class RolloutAdmin:
    def __init__(self, config: Callable[[], GatewayConfig], controller: RolloutController) -> None:
        self.config = config
        self.controller = controller

    def _admin(self, request: Request) -> str:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]}
        return admin_key_name(self.config(), headers)

    async def index(self, request: Request) -> Response:
        try:
            self._admin(request)
        except GatewayError as err:
            return error_response(err)
        return json_response({"object": "list", "data": self.controller.summary()})

    async def show(self, request: Request) -> Response:
        model = request.path_params["model"]
        try:
            self._admin(request)
            return json_response(await self.controller.status(model))
        except GatewayError as err:
            return error_response(err)
        except UnknownRollout:
            return error_response(rollout_not_found(model))
        except RolloutStoreUnavailable:
            return error_response(rollout_store_unavailable())

    async def act(self, request: Request) -> Response:
        model, action = request.path_params["model"], request.path_params["action"]
        try:
            who = self._admin(request)
            if action not in ACTIONS:
                return error_response(rollout_bad_action(action, ACTIONS))
            await self.controller.act(model, action, who)
            return json_response(await self.controller.status(model))
        except GatewayError as err:
            return error_response(err)
        except UnknownRollout:
            return error_response(rollout_not_found(model))
        except TransitionRefused as exc:
            return error_response(rollout_refused(str(exc)))
        except RolloutStoreUnavailable:
            return error_response(rollout_store_unavailable())

    def routes(self) -> list[tuple[str, Callable, list[str]]]:
        """(path, endpoint, methods) for the listener that serves /admin."""
        return [
            ("/admin/rollouts", self.index, ["GET"]),
            ("/admin/rollouts/{model:path}/{action}", self.act, ["POST"]),
            ("/admin/rollouts/{model:path}", self.show, ["GET"]),
        ]
