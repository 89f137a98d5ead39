"""What each MCP server offers, asked once at startup (and by `looping check`): connect, list
its tools, check their input schemas and names. Every server at once, each within its timeout.

Startup hooks are synchronous and may be called inside a running event loop, and the SDK's
connections belong to the loop that opened them, so discovery runs on a thread with a loop of
its own and closes what it opened; the tools' calls connect again in the serving loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Mapping
from typing import Any

import attrs
from mcp.types import PaginatedRequestParams

from looping_core.mcp._config import McpConfig, McpServerConfig, address, shown, shown_list
from looping_core.mcp._connection import open_session
from looping_core.mcp._results import tool_name
from looping_core.tools import schema_problem

__all__ = ["MAX_LISTED_PAGES", "MAX_LISTED_TOOLS", "Discovered", "McpTool", "discover"]

MAX_LISTED_PAGES = 100
"""The most pages of tools a server may list; one that pages on is a startup problem."""
MAX_LISTED_TOOLS = 10_000
"""The most tools a server may list in all; past it, a startup problem (before `tools` picks)."""


class _ListedTooMuch(Exception):
    pass


@attrs.frozen
class McpTool:
    """One of a server's tools as the model sees it: `name` (core's), the server's own name."""

    name: str
    mcp_name: str
    description: str
    input_schema: Mapping[str, Any]


@attrs.frozen
class Discovered:
    """What the servers offer (`tools` by server), what keeps them from starting (`problems`),
    and what only warrants a warning (`warnings`: a server left empty with `on_failure`)."""

    tools: Mapping[str, tuple[McpTool, ...]]
    problems: tuple[str, ...]
    warnings: tuple[str, ...]


def discover(config: McpConfig, environ: Mapping[str, str]) -> Discovered:
    """Ask every server, on a thread with its own event loop."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mcp-discovery") as pool:
        return pool.submit(asyncio.run, _discover_all(config, environ)).result()


async def _discover_all(config: McpConfig, environ: Mapping[str, str]) -> Discovered:
    names = list(config.servers)
    outcomes = await asyncio.gather(
        *(_discover_one(name, config.servers[name], environ) for name in names)
    )
    tools: dict[str, tuple[McpTool, ...]] = {}
    problems: list[str] = []
    warnings: list[str] = []
    for name, (offered, found) in zip(names, outcomes, strict=True):
        tools[name] = offered
        if found and config.servers[name].on_failure == "warn" and not offered:
            warnings += found  # servers whose family is offered without tools
        else:
            problems += found
    return Discovered(tools, tuple(problems), tuple(warnings))


def _describe(name: str, server: McpServerConfig) -> str:
    return f"MCP server {name!r} ({address(server)})"


async def _discover_one(
    name: str, server: McpServerConfig, environ: Mapping[str, str]
) -> tuple[tuple[McpTool, ...], list[str]]:
    """The server's tools as offered, and the problems found; no tools when it cannot answer."""
    who = _describe(name, server)
    fix = (
        f'fix [plugins.mcp.servers.{name}], or set on_failure = "warn" there to start '
        "without its tools"
    )
    try:
        async with asyncio.timeout(server.connect_timeout_seconds):
            async with open_session(name, server, environ) as session:
                listed = await _listed(session)
    except _ListedTooMuch as exc:
        return (), [f"{who} {exc}; {fix}"]
    except TimeoutError:
        within = server.connect_timeout_seconds
        return (), [f"{who} did not answer within {within:g} s; {fix}"]
    except Exception as exc:  # a process that cannot start, a refused connection, a bad answer
        return (), [f"{who} could not be reached: {_cause(exc)}; {fix}"]
    return _offered(name, server, listed)


async def _listed(session: Any) -> list[Any]:
    """Every tool the server lists, page by page, within the limits."""
    listed: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_LISTED_PAGES):
        page = await session.list_tools(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        listed += page.tools
        if len(listed) > MAX_LISTED_TOOLS:
            raise _ListedTooMuch(f"lists more than {MAX_LISTED_TOOLS} tools")
        cursor = page.next_cursor
        if not cursor:
            return listed
    raise _ListedTooMuch(f"lists its tools in more than {MAX_LISTED_PAGES} pages")


def _offered(
    name: str, server: McpServerConfig, listed: list[Any]
) -> tuple[tuple[McpTool, ...], list[str]]:
    where = f"[plugins.mcp.servers.{name}]"
    problems: list[str] = []
    by_name = {tool.name: tool for tool in listed}
    for key, names in (
        ("tools", server.tools),
        ("requires_approval", tuple(n for n in server.requires_approval if n != "*")),
        ("idempotent", server.idempotent),
    ):
        missing = [wanted for wanted in names if wanted not in by_name]
        if missing:
            problems.append(
                f"{where} {key} names {shown_list(missing)}, which MCP server {name!r} does not "
                f"offer (it offers: {shown_list(sorted(by_name))})"
            )
    chosen = [by_name[w] for w in server.tools if w in by_name] if server.tools else listed
    if len(chosen) > server.max_tools:
        problems.append(
            f"MCP server {name!r} offers {len(chosen)} tools, more than {where} max_tools = "
            f"{server.max_tools} allows (hosted models take about 128 at a time); choose the "
            f"ones its agents need with {where} tools = [...], or raise max_tools"
        )
        return (), problems
    tools: list[McpTool] = []
    taken: dict[str, str] = {}
    for tool in chosen:
        ours = tool_name(server.prefix, tool.name)
        if ours is None:
            problems.append(
                f"MCP server {name!r}'s tool {shown(tool.name)} has no name a model can call (tool "
                f"names are 1-63 lowercase letters, digits, '_', '.' or '-'); leave it out "
                f"with {where} tools"
            )
            continue
        if ours in taken:
            problems.append(
                f"MCP server {name!r}'s tools {shown(taken[ours])} and {shown(tool.name)} are "
                f"both called {ours!r} here; leave one out with {where} tools"
            )
            continue
        taken[ours] = tool.name
        schema = dict(tool.input_schema or {"type": "object"})
        unusable = schema_problem(schema)
        if unusable is not None:
            problems.append(
                f"MCP server {name!r}'s tool {shown(tool.name)} has an input schema that cannot "
                f"be used: {unusable}; leave it out with {where} tools"
            )
            continue
        if schema.get("type", "object") != "object":
            problems.append(
                f"MCP server {name!r}'s tool {shown(tool.name)} takes "
                f"{shown(str(schema.get('type')))}, not an object of arguments; leave it out "
                f"with {where} tools"
            )
            continue
        tools.append(McpTool(ours, tool.name, tool.description or tool.title or "", schema))
    return tuple(tools), problems


def _cause(exc: BaseException) -> str:
    """The innermost reason, from the task groups the SDK raises through."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    text = text if len(text) < 300 else text[:297] + "..."
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
