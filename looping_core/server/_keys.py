"""Every `web.AppKey` of the application, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from looping_core.a2a.jsonrpc import Method
    from looping_core.a2a.jwks import JwksCache
    from looping_core.runner import EmbeddedRunner, PushDeliverer
    from looping_core.server._connections import ConnectionGuard
    from looping_core.server._edge import Edge
    from looping_core.store import TaskStore

__all__ = ["CONNECTION_GUARD", "DELIVERER", "EDGE", "JWKS_CACHE", "METHODS", "RUNNER", "STORE"]

EDGE: web.AppKey[Edge] = web.AppKey("edge")
JWKS_CACHE: web.AppKey[JwksCache] = web.AppKey("jwks_cache")
METHODS: web.AppKey[Mapping[str, Method]] = web.AppKey("methods")
STORE: web.AppKey[TaskStore] = web.AppKey("store")
RUNNER: web.AppKey[EmbeddedRunner] = web.AppKey("runner")
DELIVERER: web.AppKey[PushDeliverer] = web.AppKey("deliverer")
CONNECTION_GUARD: web.AppKey[ConnectionGuard] = web.AppKey("connection_guard")
