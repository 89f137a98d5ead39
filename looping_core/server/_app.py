"""`create_app(config)`: the aiohttp application factory (never subclass `web.Application`).

Routes live here, in one place. Everything fallible is done before the app serves: the signing
key and the signed cards when the app is created; the plugins and the agents then too; the
database migrations, plugin stores and crash recovery in the startup context, which aiohttp
finishes before the first request is accepted.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from aiohttp import web

from looping_core.a2a.internal import JwksCache
from looping_core.agent import (
    Agent,
    AgentContext,
    AgentLoadError,
    ChatModel,
    ModelSetupError,
    builtin_model_providers,
    chat_models,
    load_agent_class,
)
from looping_core.config import Config
from looping_core.contract import ModelProvider, PluginStore
from looping_core.errors import problem_list
from looping_core.plugins import PluginHost
from looping_core.server._calls import handle_rpc
from looping_core.server._connections import ConnectionGuard, ConnectionLimits
from looping_core.server._edge import (
    CARD_PATH,
    JWKS_PATH,
    Edge,
    build_edge,
    handle_agent_card,
    handle_jwks,
    push_signer,
)
from looping_core.server._health import add_health_routes
from looping_core.server._methods import METHODS as DEFAULT_METHODS
from looping_core.server._requests import request_ids
from looping_core.server._rest import handle_rest
from looping_core.server._runtime import open_runtime
from looping_core.server._services import SERVICES, Services
from looping_core.server._streams import EventHub
from looping_core.store.internal import (
    Database,
    adopt_orphans,
    bind,
    ensure_plugin_stores,
    raise_one_line,
    upgrade,
)

__all__ = ["LOCAL_NODE", "create_app", "node_of", "prepare_store"]

_log = logging.getLogger("looping_core.server")

LOCAL_NODE = "local"
"""The node of every server on an SQLite store (one machine)."""


def create_app(
    config: Config,
    *,
    environ: Mapping[str, str] | None = None,
    today: datetime.date | None = None,
    plugins: PluginHost | None = None,
    worker: int | None = None,
    models: Mapping[str, Sequence[ChatModel]] | None = None,
) -> web.Application:
    """The agent server for `config`.

    Standalone (`worker=None`) it prepares the store itself at startup. As worker `k` of
    `looping serve --workers N` it leaves that to the supervisor (`prepare_store`), which ran it
    before any worker started, and recovers and delivers only slot `k`'s turns and pushes.

    `models` gives tenants their chat models in code instead of `[tenants.<id>.model]` (a test's
    scripted model). Raises `SigningKeyError`, `PluginProblems`, `ModelSetupError` or
    `AgentLoadError` before anything listens.
    """
    edge = build_edge(config, environ, today)
    host = plugins if plugins is not None else PluginHost.load(config, environ)
    tenant_plugins = tenant_plugin_hosts(config, host)
    agents = build_agents(config, tenant_plugins, environ, models=models)
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
    app.cleanup_ctx.append(
        _services(
            config,
            edge=edge,
            guard=guard,
            host=host,
            agents=agents,
            tenant_plugins=tenant_plugins,
            worker=worker,
        )
    )
    app.on_shutdown.append(_end_streams)
    return app


async def _end_streams(app: web.Application) -> None:
    """Open streams end as the server stops (before it waits for handlers to finish); their
    clients resume elsewhere with `Last-Event-ID`."""
    services = app.get(SERVICES)
    if services is not None and services.streams is not None:
        services.streams.end_streams("the server is stopping")


def build_agents(
    config: Config,
    tenant_plugins: Mapping[str, PluginHost],
    environ: Mapping[str, str] | None = None,
    *,
    models: Mapping[str, Sequence[ChatModel]] | None = None,
) -> dict[str, Agent]:
    """Every tenant's agent, made as the server makes it: its class imported, its models made,
    its seams read. Raises `ModelSetupError` or `AgentLoadError` listing every tenant's problems
    at once (what `looping check` reports). `models` replaces the configured models of the
    tenants it names."""
    providers = tenant_model_providers(config, tenant_plugins)
    model_problems: list[str] = []
    try:
        configured = tenant_models(config, tenant_plugins, environ, providers=providers)
    except ModelSetupError as exc:
        model_problems = list(exc.problems)
        configured = {tenant_id: () for tenant_id in config.tenants}
    given = {tenant: tuple(chosen) for tenant, chosen in (models or {}).items()}
    agents: dict[str, Agent] = {}
    agent_problems: list[str] = []
    for tenant_id, tenant in config.tenants.items():
        try:
            agent_class = load_agent_class(tenant_id, tenant.agent)
            if model_problems:
                continue  # imported, so a wrong reference shows; made once its models are
            agents[tenant_id] = agent_class(
                AgentContext(
                    tenant=tenant_id,
                    plugins=tenant_plugins[tenant_id],
                    models=given.get(tenant_id, configured[tenant_id]),
                    context_window=tenant.model.smallest_context_window if tenant.model else None,
                    loop=tenant.loop,
                    model_providers=providers[tenant_id],
                )
            )
        except (AgentLoadError, ModelSetupError) as exc:
            agent_problems.extend(exc.problem_lines())
    if agent_problems:
        raise AgentLoadError(
            problem_list("agent", [*model_problems, *agent_problems])
            if len(model_problems) + len(agent_problems) > 1
            else agent_problems[0],
            problems=[*model_problems, *agent_problems],
        )
    if model_problems:
        raise ModelSetupError(model_problems)
    return agents


def tenant_plugin_hosts(config: Config, host: PluginHost) -> dict[str, PluginHost]:
    """Each tenant's view of the plugins: its `plugins` subset, or all that are enabled."""
    return {
        tenant_id: host.for_plugins(
            tenant.plugins if tenant.plugins is not None else host.registry.keys
        )
        for tenant_id, tenant in config.tenants.items()
    }


def tenant_model_providers(
    config: Config, tenant_plugins: Mapping[str, PluginHost]
) -> dict[str, dict[str, ModelProvider]]:
    """Each tenant's model providers by name: the built-in ones and its plugins'; raises
    `ModelSetupError` when a plugin's provider takes a built-in name."""
    problems: list[str] = []
    builtins = builtin_model_providers()
    found: dict[str, dict[str, ModelProvider]] = {}
    for tenant_id in config.tenants:
        providers = found[tenant_id] = dict(builtins)
        for name, contribution in tenant_plugins[tenant_id].registry.model_providers.items():
            if name in builtins:
                problem = (
                    f"{contribution.source}: model provider {name!r} is built into "
                    "looping-core; give the plugin's provider another name"
                )
                if problem not in problems:
                    problems.append(problem)
                continue
            providers[name] = contribution.item
    if problems:
        raise ModelSetupError(problems)
    return found


def tenant_models(
    config: Config,
    tenant_plugins: Mapping[str, PluginHost],
    environ: Mapping[str, str] | None = None,
    *,
    providers: Mapping[str, Mapping[str, ModelProvider]] | None = None,
) -> dict[str, tuple[ChatModel, ...]]:
    """Every tenant's chat models from `[tenants.<id>.model]`, made with the built-in providers
    and its plugins' ones (`providers`, when the caller has them already); raises
    `ModelSetupError` listing every problem (a model provider's name, a missing key)."""
    env = os.environ if environ is None else environ
    if providers is None:
        providers = tenant_model_providers(config, tenant_plugins)
    problems: list[str] = []
    models: dict[str, tuple[ChatModel, ...]] = {}
    for tenant_id, tenant in config.tenants.items():
        models[tenant_id] = (
            chat_models(tenant_id, tenant.model, providers[tenant_id], env, problems)
            if tenant.model is not None
            else ()
        )
    if problems:
        raise ModelSetupError(problems)
    return models


def _services(
    config: Config,
    *,
    edge: Edge,
    guard: ConnectionGuard,
    host: PluginHost,
    agents: Mapping[str, Agent],
    tenant_plugins: Mapping[str, PluginHost],
    worker: int | None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The store, the HTTP client, the push deliverer and the runner, for the app's lifetime;
    the handlers find them, with the edge, in `app[SERVICES]`."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        database = Database.from_url(config.store.location())
        try:
            node = node_of(config)
            try:
                if worker is None:
                    stores = _plugin_stores(host)
                    engine = config.uses_job_engine()
                    await database.run_alone(_prepare, database, stores, node, 1, engine)
                else:
                    await database.run_alone(bind, database.peewee)
            except Exception as exc:
                raise_one_line(exc)
            signer = push_signer(config, edge.signing_key)
            async with open_runtime(
                config, database, signer=signer, agents=agents, tenant_plugins=tenant_plugins,
                node=node, worker=worker or 0, run_jobs=config.runner.serve_runs_jobs,
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
                    streams=hub,
                    deliverer=runtime.deliverer,
                    runtime=runtime,
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


def prepare_store(config: Config, plugins: PluginHost, workers: int) -> None:
    """What a server does once before its workers start: migrate the store (and the job
    engine's tables), ensure the plugin stores, and (embedded) hand its node's turns and pushes
    left by slots beyond `workers` to live ones."""
    database = Database.from_url(config.store.location())
    engine = config.uses_job_engine()
    try:
        stores = _plugin_stores(plugins)
        database.run_sync(_prepare, database, stores, node_of(config), workers, engine)
    except Exception as exc:
        raise_one_line(exc)
    finally:
        database.close()


def node_of(config: Config) -> str:
    """Who owns the turns this server runs, in the store.

    `[server] node` if set. With the job engine, the host name (nothing is recovered by node
    there). Otherwise an SQLite store, which only one machine can use, is all `local`; a
    PostgreSQL store takes the host name, with a warning: a container's host name
    changes when it is recreated, and the turns a crash left behind wait for their node's name.
    """
    if config.server.node:
        return config.server.node
    if config.uses_job_engine():
        return socket.gethostname()  # only a record of who accepted: the engine recovers turns
    if not config.store.location().startswith(("postgresql:", "postgres:")):
        return LOCAL_NODE
    return _host_node()


@functools.cache  # one warning per server, not one per worker
def _host_node() -> str:
    node = socket.gethostname()
    _log.warning(
        "[server] node is not set; this server is node %r (its host name). Give each machine"
        " a stable name: turns a crash leaves behind are recovered only under the same name.",
        node,
    )
    return node


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
            apply_engine_schema,
            queue_orphans,
        )

        connection = database.peewee.connection()  # type: ignore[no-untyped-call]
        apply_engine_schema(connection)
        queue_orphans(connection)
    else:
        adopt_orphans(database, node, workers)
