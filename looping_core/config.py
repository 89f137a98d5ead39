"""The `looping.toml` config: TOML read with `tomllib` into frozen attrs classes.

Structuring goes through a private cattrs converter that refuses unknown keys, so a typo is an
error rather than a silently ignored setting. Every problem in a file is reported at once, each as
`problem @ $.path`, in one `ConfigError` that names the file.

`[plugins.<key>]` tables are kept raw here: only the plugin knows its config type, so the plugin
host structures them (with `structure_plugin_config`, same converter, same error format) after
the plugin is loaded.

Adding a section: define a frozen attrs class with defaults, add a field to `Config`, add it to
`contracts/config.schema.json` and document it in the README.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs
import cattrs

from looping_core._origins import is_bare_origin
from looping_core._strict import describe, error_leaves, register_strict_primitives
from looping_core.contract import SecretRef
from looping_core.errors import ConfigError

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "CardConfig",
    "Config",
    "PluginsConfig",
    "PushConfig",
    "RetiredKey",
    "RunnerConfig",
    "SecurityConfig",
    "ServerConfig",
    "SkillConfig",
    "StoreConfig",
    "TenantConfig",
    "load_config",
    "parse_config",
    "resolve_config_path",
    "structure_plugin_config",
]

DEFAULT_CONFIG_FILE = "looping.toml"
CONFIG_ENV_VAR = "LOOPING_CONFIG"
MAX_WORKERS = 64
"""More server processes than this is a typo, not a deployment."""
EVENT_LOOPS = ("auto", "uvloop", "asyncio")
"""`[server] event_loop`: uvloop when installed, uvloop required, or plain asyncio."""

_NODE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TENANT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_PLUGIN_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_AGENT_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@attrs.frozen
class ServerConfig:
    """`[server]`: where the server listens and the URL gateways use to reach it."""

    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = None
    """The externally visible base URL; defaults to `http://{host}:{port}`."""
    rpc_path: str = "/a2a"
    max_body_bytes: int = 1_048_576
    """Requests with a larger body are refused before they are parsed."""
    workers: int = 1
    """Server processes sharing the listening socket and the store (`looping serve`)."""
    node: str | None = None
    """This server's name among the machines sharing one PostgreSQL store (see `node_of`)."""
    access_log: bool = True
    """Log every request at INFO (`aiohttp.access`)."""
    event_loop: str = "auto"
    """`auto` (uvloop when it is installed), `uvloop` (required), or `asyncio`."""
    header_timeout_seconds: float = 30.0
    """A request's headers must have arrived this long after the connection opened, or after
    the first byte of a request on a kept-alive connection; else the connection is closed."""
    body_timeout_seconds: float = 60.0
    """A request's whole body must have arrived this long after its headers (HTTP 408)."""
    max_connections: int = 1000
    """Open connections per server process; more are answered 503 and closed at once."""

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def endpoint_url(self) -> str:
        """The JSON-RPC endpoint: what the card advertises and gateway tokens' `aud`."""
        return self.base_url + self.rpc_path


@attrs.frozen
class SkillConfig:
    """One skill on a tenant's agent card."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()


@attrs.frozen
class RetiredKey:
    """`[[security.retired_keys]]`: a previous public key kept in the JWKS until `until`."""

    kid: str
    x: str
    """The Ed25519 public key, base64url (the JWK `x` member)."""
    until: datetime.date


@attrs.frozen
class SecurityConfig:
    """`[security]`: the agent's signing key (by indirection) and the gateways it trusts."""

    signing_key: SecretRef = attrs.field(factory=lambda: SecretRef("A2A_SIGNING_KEY"))
    gateway_origins: tuple[str, ...] = ()
    """Exact `scheme://host[:port]` origins: https, or http on a loopback host."""
    retired_keys: tuple[RetiredKey, ...] = ()
    token_leeway_seconds: int = 30
    """Clock skew allowed on `exp`, `nbf` and `iat` (at most 300)."""
    jwks_cache_seconds: int = 300
    """How long a gateway's key set is used before it is fetched again."""
    jwks_refetch_interval_seconds: int = 30
    """At most one refetch per interval per `jku` for an unknown `kid`."""


@attrs.frozen
class CardConfig:
    """A card's own fields: `[card]` for the deployment's public stub, `[tenants.<id>.card]`."""

    name: str
    description: str
    version: str = "0.1.0"
    skills: tuple[SkillConfig, ...] = ()


@attrs.frozen
class StoreConfig:
    """`[store]`: the database URL (SQLite by default: one file, nothing to start)."""

    url: str = "sqlite:///looping.db"


@attrs.frozen
class TenantConfig:
    """`[tenants.<id>]`: one agent behind the shared endpoint."""

    agent: str
    """The agent class as `"package.module:ClassName"` (imported when the server starts)."""
    card: CardConfig
    plugins: tuple[str, ...] | None = None
    """The subset of `[plugins] enabled` this tenant uses; absent means all of them."""
    allow_configless: bool = False
    """Accept SendMessage without an inline push config (the official SDK client, conformance
    suites); the gateway contract requires one."""
    max_wait_seconds: int = 30
    """How long a blocking SendMessage (`returnImmediately: false`) waits for the task to end or
    ask for input before it returns the task as it is."""


@attrs.frozen
class RunnerConfig:
    """`[runner]`: the embedded runner that executes turns in-process."""

    concurrency: int = 16
    """Turns running at once; more wait their turn."""
    on_restart: str = "fail"
    """What happens to turns a crash left SUBMITTED or WORKING: "fail" them, or "resume" them."""
    restart_message: str = "The agent restarted while it was working on this task."
    """The status message of a task failed by a restart."""


@attrs.frozen
class PushConfig:
    """`[push]`: delivering push notifications through the durable outbox."""

    timeout_seconds: float = 10.0
    max_attempts: int = 8
    max_age_seconds: int = 86_400
    """A notification older than this is given up (expired), whatever its attempts."""
    backoff_seconds: float = 1.0
    """The first retry waits about this long; each further one twice as long (with jitter)."""
    backoff_max_seconds: float = 300.0


@attrs.frozen
class PluginsConfig:
    """`[plugins]`: which installed plugins are selected, and each one's raw settings table."""

    enabled: tuple[str, ...] = ()
    settings: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)


@attrs.frozen
class Config:
    """The whole config file. `source` is the file it came from (for error messages)."""

    source: str = "<defaults>"
    server: ServerConfig = ServerConfig()
    security: SecurityConfig = SecurityConfig()
    store: StoreConfig = StoreConfig()
    card: CardConfig = attrs.field(factory=lambda: DEFAULT_STUB_CARD)
    runner: RunnerConfig = RunnerConfig()
    push: PushConfig = PushConfig()
    plugins: PluginsConfig = PluginsConfig()
    tenants: Mapping[str, TenantConfig] = attrs.field(factory=dict)


DEFAULT_STUB_CARD: CardConfig = CardConfig(
    name="looping-core agents",
    description="Agents behind one A2A endpoint; ask the gateway for a tenant's own card.",
)


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)

    def structure_secret(value: object, _: type) -> SecretRef:
        if not isinstance(value, str):
            raise ValueError('expected a string of the form "env:NAME"')
        return SecretRef.parse(value)

    converter.register_structure_hook(SecretRef, structure_secret)

    def structure_date(value: object, _: type) -> datetime.date:
        if isinstance(value, datetime.datetime) or not isinstance(value, datetime.date):
            raise ValueError("expected a TOML date such as 2026-12-31")
        return value

    converter.register_structure_hook(datetime.date, structure_date)
    register_strict_primitives(converter)
    return converter


_converter = _make_converter()


def _structure(data: Any, type_: type[Any], path: str) -> tuple[Any, list[str]]:
    try:
        return _converter.structure(data, type_), []
    except Exception as exc:  # cattrs raises ExceptionGroups of arbitrary leaf errors
        return None, [f"{describe(leaf)} @ {where}" for leaf, where in error_leaves(exc, path)]


def structure_plugin_config(
    raw: Mapping[str, Any], config_type: type[Any] | None, path: str
) -> tuple[Any, list[str]]:
    """Structure one `[plugins.<key>]` table into the plugin's config type.

    Returns `(config, problems)`; problems are `problem @ $.plugins.<key>...` lines. A plugin
    without a config type accepts only an absent or empty table.
    """
    if config_type is None:
        if raw:
            keys = ", ".join(sorted(raw))
            return None, [f"this plugin takes no settings, found ({keys}) @ {path}"]
        return None, []
    return _structure(dict(raw), config_type, path)


def resolve_config_path(
    explicit: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> Path:
    """The config file to read: `--config`, else `$LOOPING_CONFIG`, else `./looping.toml`."""
    env = os.environ if environ is None else environ
    if explicit is not None:
        return Path(explicit)
    if env.get(CONFIG_ENV_VAR):
        return Path(env[CONFIG_ENV_VAR])
    return Path(DEFAULT_CONFIG_FILE)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file; raise `ConfigError` listing every problem in it."""
    source = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(
            source,
            [f"file not found; pass --config PATH or set {CONFIG_ENV_VAR} @ $"],
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [f"cannot read the file: {exc} @ $"]) from None
    return parse_config(text, source=source)


def parse_config(text: str, source: str = "<string>") -> Config:
    """Validate TOML text as a config; raise `ConfigError` listing every problem."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, [f"invalid TOML: {exc} @ $"]) from None

    problems: list[str] = []
    plugins = _parse_plugins(raw.pop("plugins", {}), problems)
    tenants = _parse_tenants(raw.pop("tenants", {}), problems)
    server = _parse_section(raw, "server", ServerConfig, problems)
    security = _parse_section(raw, "security", SecurityConfig, problems)
    store = _parse_section(raw, "store", StoreConfig, problems)
    runner = _parse_section(raw, "runner", RunnerConfig, problems)
    push = _parse_section(raw, "push", PushConfig, problems)
    card = DEFAULT_STUB_CARD
    if "card" in raw:
        card, card_problems = _structure(raw.pop("card"), CardConfig, "$.card")
        problems.extend(card_problems)
    for unknown in raw:
        problems.append(
            f"unknown section {unknown!r}; the sections are server, security, store, card, "
            f"runner, push, plugins and tenants @ $.{unknown}"
        )
    problems.extend(_check_server(server))
    problems.extend(_check_security(security))
    problems.extend(_check_runner(runner, push))
    for tenant_id, tenant in tenants.items():
        problems.extend(_check_card(tenant.card, f"$.tenants.{tenant_id}.card", need_skills=True))
        if not 0 <= tenant.max_wait_seconds <= 600:
            problems.append(
                "max_wait_seconds must be between 0 and 600 "
                f"@ $.tenants.{tenant_id}.max_wait_seconds"
            )
    if card is not None:
        problems.extend(_check_card(card, "$.card", need_skills=False))
    problems.extend(_check_cross_references(plugins, tenants))
    if problems:
        raise ConfigError(source, problems)
    return Config(
        source=source,
        server=server,
        security=security,
        store=store,
        card=card,
        runner=runner,
        push=push,
        plugins=plugins,
        tenants=tenants,
    )


_Section = TypeVar("_Section")


def _parse_section(
    raw: dict[str, Any], name: str, type_: type[_Section], problems: list[str]
) -> _Section:
    """Structure one plain section; on error record the problems and fall back to defaults."""
    value, section_problems = _structure(raw.pop(name, {}), type_, f"$.{name}")
    problems.extend(section_problems)
    return value if value is not None else type_()


def _parse_plugins(raw: object, problems: list[str]) -> PluginsConfig:
    if not isinstance(raw, dict):
        problems.append("expected a table @ $.plugins")
        return PluginsConfig()
    enabled: list[str] = []
    raw_enabled = raw.get("enabled", [])
    if not isinstance(raw_enabled, list):
        problems.append("expected a list of plugin keys @ $.plugins.enabled")
        raw_enabled = []
    for index, key in enumerate(raw_enabled):
        where = f"$.plugins.enabled[{index}]"
        if not isinstance(key, str) or not _PLUGIN_KEY.match(key):
            problems.append(f"expected a plugin key (an entry-point name) @ {where}")
        elif key in enabled:
            problems.append(f"plugin {key!r} is listed twice @ {where}")
        else:
            enabled.append(key)
    settings: dict[str, Mapping[str, Any]] = {}
    for key, value in raw.items():
        if key == "enabled":
            continue
        if not isinstance(value, dict):
            problems.append(
                f"unknown key {key!r}: [plugins] holds `enabled` and one [plugins.<key>] "
                f"table per plugin @ $.plugins.{key}"
            )
        elif key not in enabled:
            problems.append(
                f"settings for plugin {key!r}, which is not in plugins.enabled; enable it or "
                f"remove the table @ $.plugins.{key}"
            )
        else:
            settings[key] = value
    return PluginsConfig(enabled=tuple(enabled), settings=settings)


def _parse_tenants(raw: object, problems: list[str]) -> dict[str, TenantConfig]:
    if not isinstance(raw, dict):
        problems.append("expected a table of [tenants.<id>] tables @ $.tenants")
        return {}
    tenants: dict[str, TenantConfig] = {}
    for tenant_id, table in raw.items():
        path = f"$.tenants.{tenant_id}"
        if not _TENANT_ID.match(tenant_id):
            problems.append(
                "a tenant id is 1-63 characters of lowercase letters, digits, '-' or '_', "
                f"starting with a letter or digit @ {path}"
            )
            continue
        tenant, tenant_problems = _structure(table, TenantConfig, path)
        problems.extend(tenant_problems)
        if tenant is not None:
            tenants[tenant_id] = tenant
    return tenants


def _check_server(server: ServerConfig) -> list[str]:
    problems: list[str] = []
    if not 0 <= server.port <= 65535:
        problems.append(f"port must be between 0 and 65535, got {server.port} @ $.server.port")
    if not server.rpc_path.startswith("/"):
        problems.append("rpc_path must start with '/' @ $.server.rpc_path")
    if server.node is not None and not _NODE.match(server.node):
        problems.append(
            "node must be 1 to 128 letters, digits, '.', '_', ':' or '-' @ $.server.node"
        )
    if server.event_loop not in EVENT_LOOPS:
        problems.append(
            f"event_loop must be one of {', '.join(EVENT_LOOPS)}, got {server.event_loop!r}"
            " @ $.server.event_loop"
        )
    if not 1 <= server.workers <= MAX_WORKERS:
        problems.append(
            f"workers must be between 1 and {MAX_WORKERS}, got {server.workers} @ $.server.workers"
        )
    for name in ("header_timeout_seconds", "body_timeout_seconds"):
        if not 0 < getattr(server, name) <= 3600:
            problems.append(f"{name} must be above 0 and at most 3600 @ $.server.{name}")
    if server.max_connections < 1:
        problems.append("max_connections must be at least 1 @ $.server.max_connections")
    if server.public_url is not None and not _is_base_url(server.public_url):
        problems.append(
            "public_url must be an absolute http(s) URL without query or fragment "
            "@ $.server.public_url"
        )
    return problems


def _check_security(security: SecurityConfig) -> list[str]:
    problems = []
    for index, origin in enumerate(security.gateway_origins):
        where = f"@ $.security.gateway_origins[{index}]"
        if not is_bare_origin(origin):
            problems.append(
                f"{origin!r} is not an origin: write scheme://host[:port] with no path, "
                f"userinfo, query or fragment {where}"
            )
        elif urlsplit(origin).scheme == "http" and not _is_loopback(origin):
            problems.append(
                f"{origin!r} is plain http on a non-loopback host; gateways are trusted over "
                f"https only (http is allowed for 127.0.0.1, ::1 and localhost) {where}"
            )
    if not 0 <= security.token_leeway_seconds <= 300:
        problems.append(
            "token_leeway_seconds must be between 0 and 300 @ $.security.token_leeway_seconds"
        )
    for name in ("jwks_cache_seconds", "jwks_refetch_interval_seconds"):
        if getattr(security, name) < 1:
            problems.append(f"{name} must be at least 1 @ $.security.{name}")
    for index, key in enumerate(security.retired_keys):
        if not _is_ed25519_x(key.x):
            problems.append(
                "x must be a base64url Ed25519 public key (32 bytes) "
                f"@ $.security.retired_keys[{index}].x"
            )
    return problems


def _check_runner(runner: RunnerConfig, push: PushConfig) -> list[str]:
    problems = []
    if runner.concurrency < 1:
        problems.append("concurrency must be at least 1 @ $.runner.concurrency")
    if runner.on_restart not in ("fail", "resume"):
        problems.append('on_restart must be "fail" or "resume" @ $.runner.on_restart')
    if not 0 < push.timeout_seconds <= 120:
        problems.append("timeout_seconds must be above 0 and at most 120 @ $.push.timeout_seconds")
    if push.max_attempts < 1:
        problems.append("max_attempts must be at least 1 @ $.push.max_attempts")
    if push.backoff_seconds <= 0 or push.backoff_max_seconds < push.backoff_seconds:
        problems.append(
            "backoff_seconds must be above 0 and at most backoff_max_seconds "
            "@ $.push.backoff_seconds"
        )
    return problems


def _check_card(card: CardConfig, path: str, *, need_skills: bool) -> list[str]:
    """Cards are signed; empty strings and lists would verify differently in other SDKs."""
    problems = [
        f"must not be empty @ {path}.{name}"
        for name in ("name", "description", "version")
        if not getattr(card, name).strip()
    ]
    if need_skills and not card.skills:
        problems.append(f"a card needs at least one skill: add [[...card.skills]] @ {path}.skills")
    for index, skill in enumerate(card.skills):
        where = f"{path}.skills[{index}]"
        problems.extend(
            f"must not be empty @ {where}.{name}"
            for name in ("id", "name", "description")
            if not getattr(skill, name).strip()
        )
        if not skill.tags:
            problems.append(f"a skill needs at least one tag @ {where}.tags")
        problems.extend(
            f"must not be empty @ {where}.{field}[{i}]"
            for field in ("tags", "examples")
            for i, text in enumerate(getattr(skill, field))
            if not text.strip()
        )
    return problems


def _check_cross_references(
    plugins: PluginsConfig, tenants: Mapping[str, TenantConfig]
) -> list[str]:
    problems: list[str] = []
    for tenant_id, tenant in tenants.items():
        if not _AGENT_REF.match(tenant.agent):
            problems.append(
                'agent must be "package.module:ClassName" @ $.tenants.' + tenant_id + ".agent"
            )
        for index, key in enumerate(tenant.plugins or ()):
            if key not in plugins.enabled:
                problems.append(
                    f"plugin {key!r} is not in plugins.enabled; a tenant can only use enabled "
                    f"plugins @ $.tenants.{tenant_id}.plugins[{index}]"
                )
    return problems


def _is_base_url(url: str) -> bool:
    parts = urlsplit(url)
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and not (parts.query or parts.fragment or parts.username or parts.password)
    )


def _is_loopback(origin: str) -> bool:
    host = urlsplit(origin).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_ed25519_x(value: str) -> bool:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (ValueError, binascii.Error):
        return False
    return len(raw) == 32
