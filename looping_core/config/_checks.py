"""What the types alone cannot say: ranges, formats and cross-references, each as a
`problem @ $.path` line."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from looping_core._origins import is_bare_origin
from looping_core.config._model import (
    ENGINES,
    EVENT_LOOPS,
    INSPECTION_PATH,
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_WORKERS,
    RETENTION_INTERVALS,
    CardConfig,
    LimitsConfig,
    LoopSettings,
    ModelChoice,
    ObservabilityConfig,
    PluginsConfig,
    PushConfig,
    RetentionConfig,
    RunnerConfig,
    SecurityConfig,
    ServerConfig,
    StoreConfig,
    StreamingConfig,
    TenantConfig,
    TenantLimits,
    TenantModelConfig,
    bracketed,
)
from looping_core.contract import SecretRef

__all__ = [
    "AGENT_REF",
    "PLUGIN_KEY",
    "TENANT_ID",
    "check_card",
    "check_cross_references",
    "check_grpc",
    "check_limits",
    "check_model",
    "check_observability",
    "check_retention",
    "check_runner",
    "check_security",
    "check_server",
    "check_store",
    "check_streaming",
]


NODE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
TENANT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
PLUGIN_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
AGENT_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_TOKEN = r"[!#$%&'+.^_`|~0-9A-Za-z-]+"
MEDIA_RANGE = re.compile(rf"^(?:\*/\*|{_TOKEN}/\*|{_TOKEN}/{_TOKEN})$")
"""A media type (`image/png`) or a range of them (`image/*`, `*/*`), without parameters."""


def check_server(server: ServerConfig) -> list[str]:
    problems: list[str] = []
    if not 0 <= server.port <= 65535:
        problems.append(f"port must be between 0 and 65535, got {server.port} @ $.server.port")
    if not server.rpc_path.startswith("/"):
        problems.append("rpc_path must start with '/' @ $.server.rpc_path")
    if not server.rest_path.startswith("/") or server.rest_path.endswith("/"):
        problems.append("rest_path must start with '/' and not end with one @ $.server.rest_path")
    elif server.rest_path in (server.rpc_path, "/.well-known") or server.rpc_path.startswith(
        server.rest_path + "/"
    ):
        problems.append(
            "rest_path must be a path of its own, not rpc_path, above it, or /.well-known "
            "@ $.server.rest_path"
        )
    if server.node is not None and not NODE.match(server.node):
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
    for name in ("rpc_path", "rest_path"):
        if getattr(server, name).split("/")[1:2] == [INSPECTION_PATH.split("/")[1]]:
            problems.append(
                f"{name} must not be under {INSPECTION_PATH.rsplit('/', 1)[0]}: looping-core "
                f"keeps that path for itself @ $.server.{name}"
            )
    if server.inspection and not is_loopback(f"http://{bracketed(server.host)}"):
        problems.append(
            f"inspection serves a development console on this machine only: [server] host must "
            f"be a loopback address (127.0.0.1, ::1 or localhost), not {server.host!r}; turn "
            "inspection off to serve other hosts @ $.server.inspection"
        )
    if server.public_url is not None and not is_base_url(server.public_url):
        problems.append(
            "public_url must be an absolute http(s) URL without query or fragment "
            "@ $.server.public_url"
        )
    elif server.inspection and server.public_url and not is_loopback(server.public_url):
        # A reverse proxy on this machine makes every client look like 127.0.0.1, so the
        # endpoint's own loopback check would let the whole world in.
        problems.append(
            "inspection serves a development console on this machine only: [server] "
            f"public_url must be a loopback address too, not {server.public_url!r} (a reverse "
            "proxy here makes every client look local); turn inspection off to serve behind "
            "one @ $.server.inspection"
        )
    return problems


GRPC_ADDRESS = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$")
"""`host:port`, an IPv6 host in brackets: what a gRPC client dials."""


def check_grpc(server: ServerConfig) -> list[str]:
    """`[server] grpc_*`: the port (its own), the advertised address, TLS files in pairs."""
    problems: list[str] = []
    if not 0 <= server.grpc_port <= 65535:
        problems.append(
            f"grpc_port must be between 1 and 65535, or 0 for no gRPC, got {server.grpc_port} "
            "@ $.server.grpc_port"
        )
    elif server.grpc_port and server.grpc_port == server.port:
        problems.append(
            f"grpc_port must differ from port ({server.port}): gRPC has its own listener "
            "@ $.server.grpc_port"
        )
    if server.grpc_address is not None and not GRPC_ADDRESS.match(server.grpc_address):
        problems.append(
            f"grpc_address must be host:port (an IPv6 host in brackets), got "
            f"{server.grpc_address!r} @ $.server.grpc_address"
        )
    certificate, key = server.grpc_tls_certificate, server.grpc_tls_private_key
    if (certificate is None) != (key is None):
        missing = "grpc_tls_private_key" if key is None else "grpc_tls_certificate"
        problems.append(
            "grpc_tls_certificate and grpc_tls_private_key go together: set both for TLS, "
            f"or neither @ $.server.{missing}"
        )
    return problems


def check_security(security: SecurityConfig) -> list[str]:
    problems = []
    for index, origin in enumerate(security.gateway_origins):
        where = f"@ $.security.gateway_origins[{index}]"
        if not is_bare_origin(origin):
            problems.append(
                f"{origin!r} is not an origin: write scheme://host[:port] with no path, "
                f"userinfo, query or fragment {where}"
            )
        elif urlsplit(origin).scheme == "http" and not is_loopback(origin):
            problems.append(
                f"{origin!r} is plain http on a non-loopback host; gateways are trusted over "
                f"https only (http is allowed for 127.0.0.1, ::1 and localhost) {where}"
            )
    if not 0 <= security.token_leeway_seconds <= 300:
        problems.append(
            "token_leeway_seconds must be between 0 and 300 @ $.security.token_leeway_seconds"
        )
    if not 1 <= security.max_token_lifetime_seconds <= 86400:
        problems.append(
            "max_token_lifetime_seconds must be between 1 and 86400 (a day)"
            " @ $.security.max_token_lifetime_seconds"
        )
    for name in ("jwks_cache_seconds", "jwks_refetch_interval_seconds"):
        if getattr(security, name) < 1:
            problems.append(f"{name} must be at least 1 @ $.security.{name}")
    for index, key in enumerate(security.retired_keys):
        if not is_ed25519_x(key.x):
            problems.append(
                "x must be a base64url Ed25519 public key (32 bytes) "
                f"@ $.security.retired_keys[{index}].x"
            )
    return problems


def check_retention(retention: RetentionConfig) -> list[str]:
    problems = [
        f"must not be negative (0 keeps it forever) @ $.retention.{name}"
        for name in (
            "finished_after_seconds", "events_after_seconds", "delivered_pushes_after_seconds"
        )
        if getattr(retention, name) < 0
    ]  # fmt: skip
    if retention.interval_seconds not in RETENTION_INTERVALS:
        problems.append(
            "interval_seconds must be a whole number of minutes that divides an hour or of "
            "hours that divides a day (60, 300, 600, 900, 1800, 3600, 21600, 86400, ...) "
            "@ $.retention.interval_seconds"
        )
    return problems


def check_runner(runner: RunnerConfig, push: PushConfig) -> list[str]:
    problems = []
    if runner.concurrency < 1:
        problems.append("concurrency must be at least 1 @ $.runner.concurrency")
    if runner.on_restart not in ("fail", "resume"):
        problems.append('on_restart must be "fail" or "resume" @ $.runner.on_restart')
    if runner.engine not in ENGINES:
        problems.append(f"engine must be one of {', '.join(ENGINES)} @ $.runner.engine")
    if not 0 < runner.heartbeat_seconds < runner.stalled_after_seconds:
        problems.append(
            "heartbeat_seconds must be above 0 and below stalled_after_seconds (a live worker "
            "must say so before it is taken for dead) @ $.runner.heartbeat_seconds"
        )
    if runner.sweep_seconds < 1 or 60 % runner.sweep_seconds:
        problems.append(
            "sweep_seconds must divide 60 (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60) "
            "@ $.runner.sweep_seconds"
        )
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


def check_observability(observability: ObservabilityConfig, server: ServerConfig) -> list[str]:
    problems = []
    if observability.log_level not in LOG_LEVELS:
        problems.append(
            f"log_level must be one of {', '.join(LOG_LEVELS)} @ $.observability.log_level"
        )
    if observability.log_format not in LOG_FORMATS:
        problems.append(
            f"log_format must be one of {', '.join(LOG_FORMATS)} @ $.observability.log_format"
        )
    if not 0 <= observability.metrics_port <= 65535:
        problems.append(
            "metrics_port must be between 1 and 65535, or 0 for no metrics "
            "@ $.observability.metrics_port"
        )
    elif observability.metrics_port and observability.metrics_port == server.port:
        problems.append(
            f"metrics_port must differ from [server] port ({server.port}): metrics have their "
            "own listener @ $.observability.metrics_port"
        )
    if not observability.metrics_host:
        problems.append("metrics_host must not be empty @ $.observability.metrics_host")
    endpoint = observability.traces_endpoint
    if endpoint and not is_base_url(endpoint):
        problems.append(
            "traces_endpoint must be an http(s) URL such as http://127.0.0.1:4318/v1/traces "
            "@ $.observability.traces_endpoint"
        )
    if not observability.service_name:
        problems.append("service_name must not be empty @ $.observability.service_name")
    return problems


MAX_STORE_CONNECTIONS = 64
"""The most `[store] connections`: a process's store threads, each holding one connection."""


def check_store(store: StoreConfig) -> list[str]:
    """A store URL names its database; a password in it is a secret written inline; the
    connections are at least one and a sane number."""
    problems = []
    if store.connections is not None and not 1 <= store.connections <= MAX_STORE_CONNECTIONS:
        problems.append(
            f"must be from 1 to {MAX_STORE_CONNECTIONS} (connections of one process)"
            " @ $.store.connections"
        )
    if store.url.startswith("env:"):
        try:
            SecretRef.parse(store.url)
        except ValueError as exc:
            problems.append(f"{exc} @ $.store.url")
        return problems
    credentials = urlsplit(store.url).password if "://" in store.url else None
    if credentials:
        problems.append(
            "a password in the store URL is a secret written inline; put the whole URL in an "
            'environment variable and write url = "env:DATABASE_URL" @ $.store.url'
        )
    return problems


def check_streaming(streaming: StreamingConfig) -> list[str]:
    problems = [
        f"must be above 0 @ $.streaming.{name}"
        for name in ("poll_seconds", "heartbeat_seconds", "write_timeout_seconds")
        if getattr(streaming, name) <= 0
    ]
    if streaming.coalesce_seconds < 0:
        problems.append("must not be negative @ $.streaming.coalesce_seconds")
    for name in ("buffer_events", "max_streams_per_caller"):
        if getattr(streaming, name) < 1:
            problems.append(f"must be at least 1 @ $.streaming.{name}")
    return problems


def check_card(card: CardConfig, path: str, *, need_skills: bool) -> list[str]:
    """Cards are signed; empty strings and lists would verify differently in other SDKs."""
    problems = [
        f"must not be empty @ {path}.{name}"
        for name in ("name", "description", "version")
        if not getattr(card, name).strip()
    ]
    for field in ("input_modes", "output_modes"):
        modes = getattr(card, field)
        if not modes:
            problems.append(f"a card needs at least one media type @ {path}.{field}")
        problems.extend(
            f"not a media type or range (like text/plain or image/*) @ {path}.{field}[{i}]"
            for i, mode in enumerate(modes)
            if not MEDIA_RANGE.match(mode)
        )
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


def check_cross_references(
    plugins: PluginsConfig, tenants: Mapping[str, TenantConfig]
) -> list[str]:
    problems: list[str] = []
    for tenant_id, tenant in tenants.items():
        if not AGENT_REF.match(tenant.agent):
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


def is_base_url(url: str) -> bool:
    parts = urlsplit(url)
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and not (parts.query or parts.fragment or parts.username or parts.password)
    )


def is_loopback(origin: str) -> bool:
    host = urlsplit(origin).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_ed25519_x(value: str) -> bool:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (ValueError, binascii.Error):
        return False
    return len(raw) == 32


PROVIDER_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")


def check_model(model: TenantModelConfig, path: str) -> list[str]:
    """The model and each fallback; whether the provider exists is known only once the plugins
    are loaded (the server checks that at startup)."""
    problems = _check_choice(model, path)
    for index, choice in enumerate(model.fallback):
        problems += _check_choice(choice, f"{path}.fallback[{index}]")
    return problems


def _check_choice(choice: ModelChoice, path: str) -> list[str]:
    problems = []
    if not choice.model.strip():
        problems.append(f"model must name a model @ {path}.model")
    if not PROVIDER_NAME.match(choice.provider):
        problems.append(
            f"provider must be a model provider's name, such as openai @ {path}.provider"
        )
    if choice.base_url is not None and not is_base_url(choice.base_url):
        problems.append(
            f"base_url must be an absolute http(s) URL without query or fragment @ {path}.base_url"
        )
    if choice.context_window is not None and choice.context_window < 1:
        problems.append(f"context_window must be at least 1 @ {path}.context_window")
    if not 0 < choice.timeout_seconds <= 600:
        problems.append(f"timeout_seconds must be above 0 and at most 600 @ {path}.timeout_seconds")
    if not 0 <= choice.max_retries <= 10:
        problems.append(f"max_retries must be between 0 and 10 @ {path}.max_retries")
    return problems


_LOOP_BOUNDS: dict[str, tuple[float, float, bool]] = {
    # key: (lowest, highest, whether the lowest itself is allowed)
    "max_rounds": (1, 10_000, True),
    "max_tokens": (1, 2**53 - 1, True),
    "max_seconds": (0, 86_400, False),
    "max_cost": (0, 1e12, False),
    "tool_timeout_seconds": (0, 3_600, False),
    "max_parallel_tools": (1, 256, True),
    "compact_at": (0, 1, False),
    "keep_last": (1, 1_000, True),
    "summary_max_tokens": (1, 1_000_000, True),
    "output_retries": (0, 10, True),
}

_OUTPUT_MODES = ("tool", "native")


def check_limits(limits: LimitsConfig | TenantLimits, path: str) -> list[str]:
    """Counts are whole and not negative (0: no limit); a rate is not negative; a burst holds
    at least one request."""
    problems = []
    for name in ("caller_turns", "tenant_turns", "caller_requests_per_second",
                 "tenant_requests_per_second", "caller_daily_cost"):  # fmt: skip
        value = getattr(limits, name)
        if value is not None and value < 0:
            problems.append(f"must not be negative (0: no limit) @ {path}.{name}")
    if limits.burst_seconds is not None and limits.burst_seconds <= 0:
        problems.append(f"must be above 0 @ {path}.burst_seconds")
    return problems


def check_loop(loop: LoopSettings, path: str) -> list[str]:
    """Each override that is set lies in its range."""
    problems = []
    for key, (lowest, highest, inclusive) in _LOOP_BOUNDS.items():
        value = getattr(loop, key)
        if value is None:
            continue
        low_ok = value >= lowest if inclusive else value > lowest
        if not (low_ok and value <= highest):
            bound = "at least" if inclusive else "above"
            problems.append(
                f"{key} must be {bound} {lowest:g} and at most {highest:g} @ {path}.{key}"
            )
    if loop.output_mode is not None and loop.output_mode not in _OUTPUT_MODES:
        problems.append(
            f'output_mode must be "tool" or "native", not {loop.output_mode!r} @ {path}.output_mode'
        )
    return problems
