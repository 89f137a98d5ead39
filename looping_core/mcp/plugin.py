"""The built-in `mcp` plugin: the tools of Model Context Protocol servers as tool families.

Registered by looping-core's own distribution in the `looping.plugins` group and imported only
when `[plugins] enabled` selects `mcp` (it needs `pip install 'looping-core[mcp]'`). At startup,
and in `looping check`, every server in `[plugins.mcp.servers.<name>]` is connected and its
tools listed and checked; each server's tools become the family its `tool_family` names.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from looping_core.contract import PluginInfo, Tool, ToolCall, ToolContext, ToolFamily
from looping_core.errors import ProblemsError, problem_list
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl
from looping_core.mcp._config import McpConfig, McpServerConfig, address, config_problems
from looping_core.mcp._results import tool_result

if TYPE_CHECKING:  # the SDK is imported when the plugin starts, so a listing needs none of it
    from looping_core.mcp._connection import Connections
    from looping_core.mcp._discovery import McpTool

__all__ = ["McpStartupProblems", "contract_version", "plugin_info", "tool_families"]

_log = logging.getLogger("looping_core.mcp")


class McpStartupProblems(ProblemsError):
    """The MCP servers cannot be used as configured; `problems` has a sentence for each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(problem_list("MCP", self.problems))


@hookimpl
def contract_version() -> int:
    return CONTRACT_VERSION


@hookimpl
def plugin_info() -> PluginInfo:
    return PluginInfo(
        capability="Offers the tools of Model Context Protocol servers as tool families.",
        config_type=McpConfig,
    )


@hookimpl
def tool_families(config: McpConfig | None) -> list[ToolFamily]:
    config = config or McpConfig()
    environ = dict(os.environ)
    problems = config_problems(config, environ)
    if problems:
        raise McpStartupProblems(problems)
    try:
        from looping_core.mcp._discovery import discover  # noqa: PLC0415 - needs the SDK
    except ModuleNotFoundError as exc:
        raise McpStartupProblems([
            f"the MCP SDK is not installed ({exc}); install it with "
            "`pip install 'looping-core[mcp]'`, or remove mcp from [plugins] enabled"
        ]) from None  # fmt: skip
    found = discover(config, environ)
    if found.problems:
        raise McpStartupProblems(found.problems)
    for warning in found.warnings:
        # The conclusion in the format, not the value: a long value is cut in the log line.
        _log.warning("a tool family is offered without tools (on_failure = warn): %s", warning)
    return [
        _family(name, server, found.tools[name], environ) for name, server in config.servers.items()
    ]


def _family(
    name: str, server: McpServerConfig, offered: Sequence[McpTool], environ: Mapping[str, str]
) -> ToolFamily:
    from looping_core.mcp._connection import Connections  # noqa: PLC0415 - imported by discover

    connections = Connections(name, server, environ)

    def factory(context: ToolContext) -> list[Tool]:
        caller = f"{context.tenant}\n{context.instance_id}"
        return [_tool(tool, connections, caller, server) for tool in offered]

    return ToolFamily(
        name=server.tool_family,
        description=server.description
        or f"The tools of the MCP server {name!r} ({address(server)}).",
        factory=factory,
        aclose=connections.aclose,
    )


def _tool(tool: McpTool, connections: Connections, caller: str, server: McpServerConfig) -> Tool:
    max_bytes = server.max_result_bytes

    async def handler(arguments: Mapping[str, Any], call: ToolCall) -> Any:
        result = await connections.call(caller, tool.mcp_name, arguments, call.id)
        return tuple(tool_result(result, max_bytes)) or None  # nothing: an empty result

    approval = server.requires_approval
    return Tool(
        tool.name,
        tool.description,
        tool.input_schema,
        handler,
        requires_approval="*" in approval or tool.mcp_name in approval,
        idempotent=tool.mcp_name in server.idempotent,
    )
