"""A real MCP server for the `mcp` plugin's tests, written with the official SDK (MCPServer).

    python mcp_server.py stdio
    python mcp_server.py http PORT

Its tools: arithmetic with structured output, an echo, a tool that fails, a slow one that
records being canceled, one that kills its own process mid-call, per-connection memory, an
image, the call id it was sent, and a camelCase name. `MCP_TEST_FOLDER` is where it leaves its
pid and its markers; with `MCP_TEST_HELPER` set it starts a helper process (`sleep 600`) and
leaves its pid there too.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

FOLDER = Path(os.environ.get("MCP_TEST_FOLDER", "."))
server = MCPServer("looping-test")
remembered: list[str] = []
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@server.tool()
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers."""
    return {"sum": a + b}


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason (a deliberate failure: the reason reaches the client)."""
    raise ToolError(reason)


@server.tool()
async def slow(seconds: float, marker: str) -> str:
    """Wait, leaving a marker when it starts and one when it is canceled."""
    (FOLDER / f"{marker}.started").touch()
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        (FOLDER / marker).write_text("canceled")
        raise
    return "done"


@server.tool()
def crash() -> str:
    """End this server's process in the middle of the call."""
    os._exit(3)


@server.tool()
def remember(value: str) -> str:
    """Keep a value in this connection's memory."""
    remembered.append(value)
    return "kept"


@server.tool()
def recall() -> list[str]:
    """The values kept so far."""
    return list(remembered)


@server.tool()
def pixel() -> Image:
    """A one-pixel image."""
    return Image(data=PIXEL, format="png")


@server.tool()
def call_id(ctx: Context) -> str:
    """The call id the client sent in `_meta`."""
    meta: Any = ctx.request_context.meta
    if meta is None:
        return ""
    found = meta.get("looping/toolCallId") if isinstance(meta, dict) else None
    if found is None:
        found = (getattr(meta, "model_extra", None) or {}).get("looping/toolCallId")
    return str(found or "")


@server.tool()
def authorization(ctx: Context) -> str:
    """The Authorization header of the HTTP request that carried the call ("" on stdio)."""
    request: Any = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return str(headers.get("authorization", "")) if headers is not None else ""


@server.tool(name="getWeather")
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


if __name__ == "__main__":
    FOLDER.mkdir(parents=True, exist_ok=True)
    (FOLDER / f"pid-{os.getpid()}").write_text(str(os.getpid()))
    if os.environ.get("MCP_TEST_HELPER"):  # a helper process of its own, as real servers start
        helper = subprocess.Popen(["sleep", "600"])
        (FOLDER / f"helper-{helper.pid}").write_text(str(helper.pid))
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
