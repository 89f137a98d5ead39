"""One startup assembly: what `looping serve`, `looping worker`, `looping check` and the test
harness make of a config before anything listens or runs, in one pass that finds every problem
at once, so `check` cannot drift from `serve`.

The environment is read once: every `env:NAME` secret (the signing key, the store URL, the
plugins' secrets, the models' API keys) is resolved against the one mapping the assembly holds.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import socket
from collections.abc import Mapping, Sequence

import attrs

from looping_core import _tracing
from looping_core.a2a import PushSigner, SigningKey, SigningKeyError, load_signing_key
from looping_core.a2a.internal import media_type_accepted
from looping_core.agent import (
    Agent,
    AgentContext,
    AgentLoadError,
    ChatModel,
    ModelSetupError,
)
from looping_core.agent.internal import builtin_model_providers, chat_models, load_agent_class
from looping_core.config import Config, TenantConfig
from looping_core.contract import ModelProvider, SecretRef
from looping_core.errors import LoopingError, ProblemsError, problem_list
from looping_core.plugins import PluginHost
from looping_core.server._edge import push_signer
from looping_core.server._listening import grpc_problems
from looping_core.server._telemetry import telemetry_problems
from looping_core.store.internal import PushSecrets, StoreError, store_url_problem

__all__ = [
    "LOCAL_NODE",
    "Startup",
    "StartupProblems",
    "assemble",
    "build_agents",
    "check_startup",
    "node_of",
    "tenant_models",
    "tenant_plugin_hosts",
]

_log = logging.getLogger("looping_core.server")

LOCAL_NODE = "local"
"""The node of every server on an SQLite store (one machine)."""


@attrs.frozen
class Startup:
    """What a config makes before anything runs: the key, the plugins, every tenant's agent."""

    config: Config
    environ: Mapping[str, str]
    """The environment every secret was read from (read once)."""
    signing_key: SigningKey
    push_secrets: PushSecrets
    """What seals push configs' secrets in the store (`push_secrets`)."""
    plugins: PluginHost
    tenant_plugins: Mapping[str, PluginHost]
    agents: Mapping[str, Agent]
    store_url: str
    """`[store] url`, resolved (`env:NAME` read)."""

    @property
    def signer(self) -> PushSigner:
        """What signs this agent's pushes (the serving process's and every worker's)."""
        return push_signer(self.config, self.signing_key)

    @property
    def node(self) -> str:
        """Who owns the turns this process runs, in the store (`node_of`)."""
        return node_of(self.config, self.environ)

    @property
    def uses_job_engine(self) -> bool:
        return self.config.uses_job_engine(self.environ)

    async def aclose(self) -> None:
        """Close the agents (their models' connections), then what the plugins' tool families
        hold open."""
        for agent in self.agents.values():
            await agent.aclose()
        await self.plugins.aclose()


class StartupProblems(ProblemsError):
    """Several things keep the agent from starting; `problems` has a line for each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(problem_list("startup", self.problems))


def signing_key_material(key: SigningKey) -> bytes:
    """The signing key's private bytes (the JWK's `d`), the default key material for push
    secrets: never used as is, only through the store's key derivation."""
    private = str(key.key.as_dict(private=True)["d"])
    return base64.urlsafe_b64decode(private + "=" * (-len(private) % 4))


def push_secrets(
    config: Config, signing_key: SigningKey, environ: Mapping[str, str]
) -> PushSecrets:
    """The keys for push configs' secrets: `[store] secrets_key`, or one derived from the signing
    key; with `[store] previous_secrets_keys` to open older values. A `LoopingError` naming the
    key when one is unset or too short."""

    def material(ref: SecretRef, where: str) -> bytes:
        if not ref.is_set(environ):
            raise LoopingError(
                f"{where} is read from the environment variable {ref.env}, which is not set; "
                f"export it before starting @ $.store.{where.rsplit('] ', maxsplit=1)[-1]}"
            )
        text = ref.value(environ)
        try:
            return signing_key_material(SigningKey.from_jwk(json.loads(text)))
        except (ValueError, TypeError, AttributeError, LoopingError):
            pass  # not a JWK: a secret of its own
        if len(text) < 32:
            raise LoopingError(
                f"{where} ({ref.env}) must be at least 32 characters; make one with "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        return text.encode()

    store = config.store
    current = (
        material(store.secrets_key, "[store] secrets_key")
        if store.secrets_key is not None
        else signing_key_material(signing_key)
    )
    previous = [
        material(ref, "[store] previous_secrets_keys") for ref in store.previous_secrets_keys
    ]
    return PushSecrets(current, previous)


def check_startup(
    config: Config,
    *,
    environ: Mapping[str, str] | None = None,
    plugins: PluginHost | None = None,
    models: Mapping[str, Sequence[ChatModel]] | None = None,
    make_agents: bool = True,
) -> tuple[Startup | None, list[tuple[LoopingError, list[str]]]]:
    """Every startup step, each failure kept: the signing key, the store URL (its scheme and
    driver, not a connection), the packages metrics and traces need, the plugins, and (once the
    plugins load, and if `make_agents`) every tenant's agent. Returns the assembly when nothing
    failed (without agents unless made), and each failure with its lines as `looping check`
    lists them (`problem @ $.path`)."""
    env = dict(os.environ) if environ is None else environ
    failures: list[tuple[LoopingError, list[str]]] = []
    key = None
    try:
        key = load_signing_key(config.security.signing_key, env)
    except SigningKeyError as exc:
        failures.append((exc, [f"{exc} @ $.security.signing_key"]))
    secrets: PushSecrets | None = None
    if key is not None:
        try:
            secrets = push_secrets(config, key, env)
        except LoopingError as exc:
            failures.append((exc, [str(exc)]))
    store_url = ""
    try:
        store_url = config.store.location(env)
        problem = store_url_problem(store_url)
    except LoopingError as exc:
        problem = str(exc)
    if problem is not None:
        failures.append((StoreError(problem), [f"{problem} @ $.store.url"]))
    _tracing.capture_content(config.observability.capture_message_content)
    telemetry = telemetry_problems(config.observability)
    if telemetry:
        failures.append((StartupProblems(telemetry), telemetry))
    grpc = grpc_problems(config)
    if grpc:
        failures.append((StartupProblems(grpc), grpc))
    host = plugins
    agents: dict[str, Agent] = {}
    tenant_plugins: dict[str, PluginHost] = {}
    try:
        if host is None:
            host = PluginHost.load(config, env)
        tenant_plugins = tenant_plugin_hosts(config, host)
        if make_agents:
            agents = build_agents(config, tenant_plugins, env, models=models)
    except LoopingError as exc:
        lines = exc.problem_lines() if isinstance(exc, ProblemsError) else [str(exc)]
        failures.append((exc, lines))
    if failures or key is None or host is None or secrets is None:
        return None, failures
    startup = Startup(
        config=config,
        environ=env,
        signing_key=key,
        push_secrets=secrets,
        plugins=host,
        tenant_plugins=tenant_plugins,
        agents=agents,
        store_url=store_url,
    )
    return startup, []


def assemble(
    config: Config,
    *,
    environ: Mapping[str, str] | None = None,
    plugins: PluginHost | None = None,
    models: Mapping[str, Sequence[ChatModel]] | None = None,
) -> Startup:
    """The assembly, or the error: one failure raises as itself (`SigningKeyError`,
    `PluginProblems`, `AgentLoadError`, ...), several as `StartupProblems` listing each."""
    startup, failures = check_startup(config, environ=environ, plugins=plugins, models=models)
    if len(failures) == 1:
        raise failures[0][0]
    if failures:
        raise StartupProblems([line for _, lines in failures for line in lines])
    assert startup is not None
    return startup


def build_agents(
    config: Config,
    tenant_plugins: Mapping[str, PluginHost],
    environ: Mapping[str, str],
    *,
    models: Mapping[str, Sequence[ChatModel]] | None = None,
) -> dict[str, Agent]:
    """Every tenant's agent, made as the server makes it: its class imported, its models made,
    its seams read. Raises `ModelSetupError` or `AgentLoadError` listing every tenant's problems
    at once. `models` replaces the configured models of the tenants it names."""
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
    beside = config.source_folder
    for tenant_id, tenant in config.tenants.items():
        try:
            agent_class = load_agent_class(tenant_id, tenant.agent, beside=beside)
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
                    environ=environ,
                    prices=config.prices,
                )
            )
            agent_problems.extend(_unlisted_answer_modes(tenant_id, tenant, agents[tenant_id]))
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


def _unlisted_answer_modes(tenant_id: str, tenant: TenantConfig, agent: Agent) -> list[str]:
    """The media types the agent answers with that the tenant's card does not list."""
    listed = tenant.card.output_modes
    missing = [m for m in agent.output_modes() or () if not media_type_accepted(m, listed)]
    if not missing:
        return []
    return [
        f"tenants.{tenant_id}.card.output_modes: {type(agent).__name__} answers with "
        f"{', '.join(missing)}, which the card does not list; add it (the default lists "
        "text/plain and application/json)"
    ]


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
    environ: Mapping[str, str],
    *,
    providers: Mapping[str, Mapping[str, ModelProvider]] | None = None,
) -> dict[str, tuple[ChatModel, ...]]:
    """Every tenant's chat models from `[tenants.<id>.model]`, made with the built-in providers
    and its plugins' ones (`providers`, when the caller has them already); raises
    `ModelSetupError` listing every problem (a model provider's name, a missing key)."""
    if providers is None:
        providers = tenant_model_providers(config, tenant_plugins)
    problems: list[str] = []
    models: dict[str, tuple[ChatModel, ...]] = {}
    for tenant_id, tenant in config.tenants.items():
        models[tenant_id] = (
            chat_models(tenant_id, tenant.model, providers[tenant_id], environ, problems)
            if tenant.model is not None
            else ()
        )
    if problems:
        raise ModelSetupError(problems)
    return models


def node_of(config: Config, environ: Mapping[str, str] | None = None) -> str:
    """Who owns the turns this server runs, in the store.

    `[server] node` if set. With the job engine, the host name (nothing is recovered by node
    there). Otherwise an SQLite store, which only one machine can use, is all `local`; a
    PostgreSQL store takes the host name, with a warning: a container's host name
    changes when it is recreated, and the turns a crash left behind wait for their node's name.
    """
    if config.server.node:
        return config.server.node
    if config.uses_job_engine(environ):
        return socket.gethostname()  # only a record of who accepted: the engine recovers turns
    if not config.store.location(environ).startswith(("postgresql:", "postgres:")):
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
