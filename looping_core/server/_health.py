"""Liveness and readiness, for orchestrators: no token, nothing revealed beyond up or down and
which part is down.

- `GET /healthz`: the process answers (200).
- `GET /readyz`: the store answers and its migrations are current, the runner and the push
  deliverer (or, with a job engine, its workers) are running (200); otherwise 503 naming the
  failing parts. A change either way is
  logged once, with the reason, so a probe every second does not flood the log.
"""

from __future__ import annotations

import json
import logging

from aiohttp import web

from looping_core.server._services import SERVICES

__all__ = ["HEALTH_PATH", "READY_PATH", "add_health_routes"]

_log = logging.getLogger("looping_core.server")

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
STORE_TIMEOUT_SECONDS = 2.0
_READY: web.AppKey[list[bool]] = web.AppKey("ready", list)
"""The last readiness answered (empty before the first), to log changes only."""


def add_health_routes(app: web.Application) -> None:
    app[_READY] = []
    app.router.add_get(HEALTH_PATH, handle_health)
    app.router.add_get(READY_PATH, handle_ready)


async def handle_health(request: web.Request) -> web.Response:
    return _answer(200, {"status": "ok"})


async def handle_ready(request: web.Request) -> web.Response:
    services = request.app.get(SERVICES)
    failing: dict[str, str] = {}
    if services is None:
        failing["server"] = "starting"
    else:
        problem = await services.store.unready(STORE_TIMEOUT_SECONDS)
        if problem is not None:
            failing["store"] = problem
        if services.runtime is None:
            failing["runner"] = "not running"
        else:
            for part, running in services.runtime.running.items():
                if not running:
                    failing[part] = "not running"
    _note_change(request.app, failing)
    if failing:
        return _answer(503, {"status": "unavailable", "failing": sorted(failing)})
    return _answer(200, {"status": "ready"})


def _note_change(app: web.Application, failing: dict[str, str]) -> None:
    ready = not failing
    history = app.get(_READY)
    if history is None:
        return
    if history and history[-1] == ready:
        return
    history[:] = [ready]
    if ready:
        _log.info("ready")
    else:
        reasons = "; ".join(f"{part}: {why}" for part, why in sorted(failing.items()))
        _log.warning("not ready: %s", reasons)


def _answer(status: int, document: dict[str, object]) -> web.Response:
    return web.Response(
        body=json.dumps(document).encode(),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
