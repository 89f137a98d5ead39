"""`[plugins.mcp]`: the MCP servers whose tools become tool families, and the checks the
config's types cannot make (one transport per server, names tools can have, secrets set)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Literal

import attrs

from looping_core.contract import ConfigPath, SecretRef

__all__ = [
    "McpConfig",
    "McpServerConfig",
    "address",
    "config_problems",
    "resolved",
    "shown",
    "shown_list",
    "without_secrets",
]

_FAMILY = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")
_PREFIX = re.compile(r"^[a-z][a-z0-9_]{0,30}$")


CONFIG_FOLDER = ConfigPath(".")
"""A stdio server's folder unless its `cwd` says: the config file's."""


@attrs.frozen
class McpServerConfig:
    """One MCP server: how to reach it (`command` for stdio, or `url` for Streamable HTTP), the
    tool family its tools make, which of its tools and how they are named."""

    tool_family: str
    """The family tenants and subtask recipes select (`[tenants.<id>] tool_families`)."""
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    """The stdio server's environment beyond a safe default (PATH, HOME, ...); a value may be
    `env:NAME`, read from this process's environment."""
    cwd: ConfigPath = CONFIG_FOLDER
    """The stdio server's folder: by default the config file's (a relative one is taken from
    there too), so `command = "./server.py"` or `args = ["server.py"]` mean the file beside
    `looping.toml`, wherever `looping` runs from."""
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    """HTTP headers for every request (`Authorization`, ...); a value may be `env:NAME`."""
    description: str = ""
    """The family's description; by default the server's name and what it serves."""
    tools: tuple[str, ...] = ()
    """The server's tools to offer, by their MCP names; empty: all of them."""
    prefix: str = ""
    """Put before every tool's name (`files` makes `read` into `files_read`)."""
    requires_approval: tuple[str, ...] = ()
    """The server's tools (MCP names) whose every call the caller must approve before it runs;
    `["*"]`: all of them."""
    idempotent: tuple[str, ...] = ()
    """The server's tools (MCP names) a call of which may run again when a crash cut it off
    after it began (the server's own hints are not trusted for this)."""
    timeout_seconds: float = 30.0
    """How long each call may take; one past it is canceled on the server."""
    connect_timeout_seconds: float = 30.0
    """How long connecting (starting a stdio server) and listing its tools may take."""
    per_caller: bool = False
    """A connection of its own for each caller (a stdio server then runs once per caller), for
    servers that keep per-user state; otherwise one connection is shared."""
    max_caller_connections: int = 32
    """With `per_caller`, the most kept open at once: the least recently used closes first."""
    max_restarts: int = 3
    """A server whose connection broke is connected again on its next call, at most this often
    within ten minutes; then its calls fail until the server is restarted."""
    max_tools: int = 128
    """The most tools the family may offer (hosted models take about 128 at a time): a server
    offering more is a startup problem, fixed by choosing some with `tools = [...]`."""
    max_result_bytes: int = 1_048_576
    """A call's result larger than this (its content's bytes) is cut to it, with a note saying
    so, before it reaches the model and the session."""
    max_message_bytes: int = 16_777_216
    """A stdio server's line (one JSON-RPC message) larger than this breaks its connection,
    which is opened again at the next call; the line is never held whole."""
    on_failure: Literal["fail", "warn"] = "fail"
    """A server that cannot be reached at startup: `fail` stops the server with the cause;
    `warn` logs it and offers the family without tools."""


@attrs.frozen
class McpConfig:
    """`[plugins.mcp]`: `[plugins.mcp.servers.<name>]` tables."""

    servers: Mapping[str, McpServerConfig] = attrs.field(factory=dict)


def _where(name: str, key: str = "") -> str:
    return f"[plugins.mcp.servers.{name}]" + (f" {key}" if key else "")


def config_problems(config: McpConfig, environ: Mapping[str, str]) -> list[str]:
    """Every problem of the servers' settings, each a sentence that names the key and the fix."""
    problems: list[str] = []
    families: dict[str, str] = {}
    for name, server in config.servers.items():
        if (server.command is None) == (server.url is None):
            problems.append(
                f"{_where(name)} needs either `command` (a stdio server) or `url` (Streamable "
                "HTTP), not both and not neither"
            )
        if server.url is not None and not server.url.startswith(("http://", "https://")):
            problems.append(f"{_where(name, 'url')} must be an http:// or https:// URL")
        if server.command is not None and not server.command.strip():
            problems.append(f"{_where(name, 'command')} is empty: name the program to run")
        if server.command is None and (server.args or server.env):
            problems.append(f"{_where(name)}: `args` and `env` are for a stdio `command`")
        if server.url is None and server.headers:
            problems.append(f"{_where(name)}: `headers` are for a server reached by `url`")
        if not _FAMILY.match(server.tool_family):
            problems.append(
                f"{_where(name, 'tool_family')} must be 1-63 lowercase letters, digits, '_', "
                f"'.' or '-', starting with a letter; got {server.tool_family!r}"
            )
        elif server.tool_family in families:
            problems.append(
                f"{_where(name, 'tool_family')} {server.tool_family!r} is also server "
                f"{families[server.tool_family]!r}'s; give each server a family of its own"
            )
        families.setdefault(server.tool_family, name)
        if server.prefix and not _PREFIX.match(server.prefix):
            problems.append(
                f"{_where(name, 'prefix')} must be 1-31 lowercase letters, digits or '_', "
                f"starting with a letter; got {server.prefix!r}"
            )
        for key in ("timeout_seconds", "connect_timeout_seconds"):
            if not getattr(server, key) > 0:
                problems.append(f"{_where(name, key)} must be more than 0")
        if server.max_caller_connections < 1:
            problems.append(f"{_where(name, 'max_caller_connections')} must be at least 1")
        for key in ("max_tools", "max_result_bytes", "max_message_bytes"):
            if getattr(server, key) < 1:
                problems.append(f"{_where(name, key)} must be at least 1")
        if server.max_restarts < 0:
            problems.append(f"{_where(name, 'max_restarts')} must be 0 or more")
        for key, values in (("env", server.env), ("headers", server.headers)):
            for entry, value in values.items():
                problems += _secret_problems(name, f"{key}.{entry}", value, environ)
    return problems


def _secret_problems(name: str, key: str, value: str, environ: Mapping[str, str]) -> list[str]:
    if not value.startswith("env:"):
        return []
    try:
        ref = SecretRef.parse(value)
    except ValueError as exc:
        return [f"{_where(name, key)}: {exc}"]
    if not ref.is_set(environ):
        return [
            f"{_where(name, key)} is read from the environment variable {ref.env}, which is "
            f"not set; export {ref.env} before starting"
        ]
    return []


def address(server: McpServerConfig) -> str:
    """Where the server is, fit for logs, problems and the family's description: the command,
    or the URL without what may be a secret (user info, query, fragment)."""
    if server.command is not None:
        return f"stdio: {server.command}"
    return without_secrets(server.url or "")


def without_secrets(url: str) -> str:
    """`url` without its user info, query and fragment (where tokens and keys ride)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def shown(name: str, limit: int = 64) -> str:
    """A name an MCP server chose, fit for a log line or a problem: quoted with every control
    character escaped (a newline cannot forge a line), cut past `limit` characters."""
    text = name if len(name) <= limit else name[:limit] + "..."
    return repr(text)


def shown_list(names: list[str], limit: int = 20) -> str:
    """Some of a server's names, each `shown`, the rest counted."""
    listed = ", ".join(shown(name) for name in names[:limit])
    more = len(names) - limit
    return listed + (f" and {more} more" if more > 0 else "") if names else "nothing"


def resolved(values: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """`values` with each `env:NAME` replaced by the variable's value (checked set at startup)."""
    return {
        key: SecretRef.parse(value).value(environ) if value.startswith("env:") else value
        for key, value in values.items()
    }
