"""What the handlers use, as one typed object built once when the application starts, and the
one `web.AppKey` it is kept under."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
from aiohttp import web

if TYPE_CHECKING:
    from looping_core.a2a.internal import JwksCache, Method
    from looping_core.runner.internal import PushDeliverer, Runner
    from looping_core.server._connections import ConnectionGuard
    from looping_core.server._edge import Edge
    from looping_core.server._limits import Limits
    from looping_core.server._runtime import Runtime
    from looping_core.server._streams import EventHub
    from looping_core.store.internal import TaskInspection, TaskStore

__all__ = ["SERVICES", "Services"]


@attrs.frozen
class Services:
    """The edge (cards, keys, token policy), the method table, the connection guard, the task
    store, the runner, the gateways' key-set cache, the limits, and the event hub for streams
    (`None` when `[streaming] enabled` is false)."""

    edge: Edge
    methods: Mapping[str, Method]
    guard: ConnectionGuard
    store: TaskStore
    runner: Runner
    jwks: JwksCache
    limits: Limits
    """What one tenant or caller may take (`[limits]`)."""
    streams: EventHub | None = None
    deliverer: PushDeliverer | None = None
    runtime: Runtime | None = None
    """What runs turns and pushes (its parts' health; the job engine, if any)."""
    inspection: TaskInspection | None = None
    """What the inspection endpoint reads (`None` unless `[server] inspection`)."""


SERVICES: web.AppKey[Services] = web.AppKey("services")
