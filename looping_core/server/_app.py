"""`create_app(config)`: the aiohttp application factory (never subclass `web.Application`).

Routes live here, in one place. Everything fallible is done before the app serves: the signing
key and the signed cards when the app is created; the plugins and the agents then too; the
database migrations, plugin stores and crash recovery in the startup context, which aiohttp
finishes before the first request is accepted.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from aiohttp import web

from looping_core.a2a.internal import JwksCache
from looping_core.agent import (
    ChatModel,
)
from looping_core.config import Config
from looping_core.contract import PluginStore
from looping_core.plugins import PluginHost
from looping_core.server._calls import handle_rpc
from looping_core.server._connections import ConnectionGuard, ConnectionLimits
from looping_core.server._documents import handle_agent_card, handle_jwks
from looping_core.server._edge import CARD_PATH, JWKS_PATH, Edge, build_edge
from looping_core.server._health import add_health_routes
from looping_core.server._inspect import add_inspection_route
from looping_core.server._limits import Limits
from looping_core.server._methods import METHODS as DEFAULT_METHODS
from looping_core.server._requests import request_ids
from looping_core.server._rest import handle_rest
from looping_core.server._runtime import open_runtime
from looping_core.server._services import SERVICES, Services
from looping_core.server._startup import Startup, assemble
from looping_core.server._streams import EventHub
from looping_core.store.internal import (
    Database,
    PushSecrets,
    TaskInspection,
    adopt_orphans,
    bind,
    ensure_plugin_stores,
    raise_one_line,
    seal_again,
    upgrade,
)

__all__ = ["create_app", "prepare_store"]

_log = logging.getLogger("looping_core.server")


def create_app(
    config: Config,
    *,
    environ: Mapping[str, str] | None = None,
    today: datetime.date | None = None,
    plugins: PluginHost | None = None,
    worker: int | None = None,
    models: Mapping[str, Sequence[ChatModel]] | None = None,
    startup: Startup | None = None,
) -> web.Application:
    """The agent server for `config`.

    Standalone (`worker=None`) it prepares the store itself at startup. As worker `k` of
    `looping serve --workers N` it leaves that to the supervisor (`prepare_store`), which ran it
    before any worker started, and recovers and delivers only slot `k`'s turns and pushes.

    `models` gives tenants their chat models in code instead of `[tenants.<id>.model]` (a test's
    scripted model). Everything is checked before anything listens (`assemble`: one problem
    raises as itself, `SigningKeyError`, `PluginProblems`, `ModelSetupError`, `AgentLoadError`;
    several as `StartupProblems`); `startup` is that assembly when the caller made it already.
    """
    if startup is None:
        startup = assemble(config, environ=environ, plugins=plugins, models=models)
    answer_modes = {
        tenant: modes
        for tenant, agent in startup.agents.items()
        if (modes := agent.output_modes()) is not None
    }
    edge = build_edge(config, startup.signing_key, today, answer_modes=answer_modes)
    guard = ConnectionGuard(
        ConnectionLimits(
            header_timeout=config.server.header_timeout_seconds,
            max_connections=config.server.max_connections,
        )
    )
    app = web.Application(
        client_max_size=config.server.max_body_bytes,
        middlewares=[guard.middleware, request_ids],
    )
    add_health_routes(app)
    app.router.add_get(JWKS_PATH, handle_jwks)
    app.router.add_get(CARD_PATH, handle_agent_card)
    app.router.add_post(config.server.rpc_path, handle_rpc)
    # Any path under rest_path, control characters included (the handler refuses them).
    app.router.add_route("*", config.server.rest_path + r"{tail:(/[\s\S]*)?}", handle_rest)
    if config.server.inspection:
        add_inspection_route(app)
    app.cleanup_ctx.append(_services(startup, edge=edge, guard=guard, worker=worker))
    if config.server.grpc_port:
        from looping_core.server._grpc import grpc_binding  # noqa: PLC0415 - the grpc extra

        app.cleanup_ctx.append(grpc_binding(config, reuse_port=worker is not None))
    app.on_shutdown.append(_end_streams)
    return app


async def _end_streams(app: web.Application) -> None:
    """Open streams end as the server stops (before it waits for handlers to finish); their
    clients resume elsewhere with `Last-Event-ID`."""
    services = app.get(SERVICES)
    if services is not None and services.streams is not None:
        services.streams.end_streams("the server is stopping")


def _services(
    startup: Startup, *, edge: Edge, guard: ConnectionGuard, worker: int | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The store, the HTTP client, the push deliverer and the runner, for the app's lifetime;
    the handlers find them, with the edge, in `app[SERVICES]`."""

    config = startup.config

    async def context(app: web.Application) -> AsyncIterator[None]:
        database = Database.from_url(startup.store_url, connections=config.store.connections)
        try:
            node = startup.node
            try:
                if worker is None:
                    stores = _plugin_stores(startup.plugins)
                    engine = startup.uses_job_engine
                    await database.run_alone(_prepare, database, stores, node, 1, engine)
                else:
                    await database.run_alone(bind, database.peewee)
            except Exception as exc:
                raise_one_line(exc)
            async with open_runtime(
                startup, database, node=node, worker=worker or 0,
                run_jobs=config.runner.serve_runs_jobs,
            ) as runtime:  # fmt: skip
                jwks = JwksCache(
                    runtime.session,
                    ttl=config.security.jwks_cache_seconds,
                    refetch_interval=config.security.jwks_refetch_interval_seconds,
                )
                hub = (
                    EventHub(runtime.store, config.streaming) if config.streaming.enabled else None
                )
                app[SERVICES] = Services(
                    edge=edge,
                    methods=DEFAULT_METHODS,
                    guard=guard,
                    store=runtime.store,
                    runner=runtime.runner,
                    jwks=jwks,
                    limits=Limits.from_config(config),
                    streams=hub,
                    deliverer=runtime.deliverer,
                    runtime=runtime,
                    inspection=(
                        TaskInspection(database, node=node, worker=worker or 0)
                        if config.server.inspection
                        else None
                    ),
                )
                if hub is not None:
                    await hub.start()
                try:
                    yield
                finally:
                    if hub is not None:
                        await hub.close()
        finally:
            database.close()

    return context


def prepare_store(startup: Startup, workers: int) -> None:
    """What a server does once before its workers start: migrate the store (and the job
    engine's tables), ensure the plugin stores, and (embedded) hand its node's turns and pushes
    left by slots beyond `workers` to live ones."""
    database = Database.from_url(startup.store_url)
    engine = startup.uses_job_engine
    node = startup.node
    try:
        stores = _plugin_stores(startup.plugins)
        database.run_sync(_prepare, database, stores, node, workers, engine)
        database.run_sync(_seal_push_secrets, database, startup.push_secrets)
    except Exception as exc:
        raise_one_line(exc)
    finally:
        database.close()


def _seal_push_secrets(database: Database, secrets: PushSecrets) -> None:
    """Refuse to start when push configs are sealed with a key this server lacks; seal with the
    current key those sealed with a previous one or kept in clear by an older release."""
    sealed = seal_again(database, secrets)
    if sealed:
        _log.info("sealed the secrets of %d push config(s) with the current key", sealed)


def _plugin_stores(plugins: PluginHost) -> list[PluginStore]:
    return [contribution.item for contribution in plugins.registry.stores.values()]


def _prepare(
    database: Database, stores: list[PluginStore], node: str, workers: int, engine: bool
) -> None:
    """Core migrations, plugin stores' `ensure_tables`, then the job engine's tables, or the
    turns of orphaned worker slots (embedded), on the store's thread."""
    bind(database.peewee)
    upgrade(database.peewee)
    ensure_plugin_stores(database.peewee, stores)
    if engine:
        from looping_core.runner.internal import (  # noqa: PLC0415 - postgres extra
            analyze_engine_tables,
            apply_engine_schema,
            queue_orphans,
        )

        connection = database.peewee.connection()  # type: ignore[no-untyped-call]
        apply_engine_schema(connection)
        queue_orphans(connection)
        analyze_engine_tables(connection)
    else:
        adopt_orphans(database, node, workers)
