"""A hostile MCP server (tests/mcp/hostile_server.py, which breaks the protocol on purpose)
against the `mcp` plugin: schemas that would fetch or loop are refused at startup with nothing
fetched; bytes that are not UTF-8 and lines over the cap break the connection, which the next
call opens again; garbage lines are skipped with one warning; results are cut; listing is
bounded; names are escaped; helpers the server starts end with it; a busy connection is never
closed to make room; and a URL's secrets stay out of the logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from looping_core.content import DataBlock, TextBlock
from looping_core.contract import ToolError, ToolFamily
from looping_core.mcp import McpConfig, McpServerConfig
from looping_core.mcp.plugin import tool_families
from looping_core.testing import plugin_problems

from support.processes import alive
from test_mcp_plugin import ALICE, BOB, call, http_server, stdio, tools_of, wait_until

HOSTILE = Path(__file__).with_name("hostile_server.py")


def hostile(folder: Path, env: Mapping[str, str] | None = None, **settings: Any) -> dict[str, Any]:
    """`[plugins.mcp.servers.bad]` for the hostile server, as the config file would say it."""
    return {
        "tool_family": "bad",
        "command": sys.executable,
        "args": [str(HOSTILE)],
        "env": {"HOSTILE_FOLDER": str(folder), **(env or {})},
        **settings,
    }


def tools_env(*tools: Mapping[str, Any]) -> dict[str, str]:
    return {"HOSTILE_TOOLS": json.dumps(list(tools))}


PLAIN = ("echo", "garbage", "not_utf8", "huge_line", "huge_result", "helper")


def plain_tools() -> dict[str, str]:
    return tools_env(*({"name": name, "inputSchema": {"type": "object"}} for name in PLAIN))


def problems_of(settings: Mapping[str, Any]) -> list[str]:
    return [problem.message for problem in plugin_problems("mcp", {"servers": {"bad": settings}})]


def family_of(settings: Mapping[str, Any]) -> ToolFamily:
    config = McpServerConfig(**{**settings, "args": tuple(settings["args"])})
    [built] = tool_families(McpConfig({"bad": config}))
    return built


@contextlib.asynccontextmanager
async def opened(settings: Mapping[str, Any]) -> AsyncIterator[ToolFamily]:
    """The family of `settings`, closed (its servers stopped) at the end."""
    built = family_of(settings)
    try:
        yield built
    finally:
        assert built.aclose is not None
        await built.aclose()


@pytest.fixture
async def counting() -> AsyncIterator[tuple[list[str], str]]:
    """A real HTTP server on 127.0.0.1 that records every request made to it."""
    hits: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"type": "object"})

    app = web.Application()
    app.router.add_get("/{name}", handle)
    async with TestServer(app, host="127.0.0.1") as server:
        yield hits, str(server.make_url("/schema.json"))


# -- schemas ------------------------------------------------------------------------------------


async def test_schemas_that_refer_outside_or_loop_are_refused_at_startup_fetching_nothing(
    tmp_path: Path, counting: tuple[list[str], str]
) -> None:
    hits, url = counting
    secret = tmp_path / "secret.json"
    secret.write_text('{"const": "THE-SECRET"}')
    settings = hostile(
        tmp_path,
        tools_env(
            {"name": "web", "inputSchema": {"type": "object", "$ref": url}},
            {"name": "file", "inputSchema": {"type": "object", "$ref": secret.as_uri()}},
            {"name": "loop", "inputSchema": {"type": "object", "$ref": "#"}},
            {"name": "fine", "inputSchema": {"type": "object"}},
        ),
    )
    found = await asyncio.to_thread(problems_of, settings)  # the loop stays free to serve
    web_problem, file_problem, loop_problem = found
    assert (
        f"MCP server 'bad''s tool 'web' has an input schema that cannot be used: its $ref '{url}'"
        in web_problem
    )
    assert "refers outside the schema" in web_problem
    assert "leave it out with [plugins.mcp.servers.bad] tools" in web_problem
    assert "tool 'file'" in file_problem
    assert "THE-SECRET" not in file_problem
    assert "tool 'loop'" in loop_problem
    assert "loop back to themselves ($ref cycle)" in loop_problem
    assert hits == []  # nothing was fetched
    # Choosing only the fine tool starts.
    assert await asyncio.to_thread(problems_of, {**settings, "tools": ["fine"]}) == []
    assert hits == []


# -- the stdio stream ---------------------------------------------------------------------------


__all__ = ["http_server"]  # a fixture, imported for the URL test


@pytest.fixture
def plain(tmp_path: Path) -> dict[str, Any]:
    return hostile(
        tmp_path,
        {**plain_tools(), "HOSTILE_LINE_BYTES": str(3 * 1024 * 1024)},
        timeout_seconds=60.0,
        max_message_bytes=1024 * 1024,
        max_result_bytes=1000,
        max_restarts=2,
    )


async def test_bytes_that_are_not_utf8_break_the_connection_and_the_next_call_reconnects(
    plain: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with opened(plain) as built:
        tools = tools_of(built)
        assert await call(tools["echo"], {"text": "one"}) == [TextBlock("one")]
        first = {path.name for path in tmp_path.glob("pid-*")}
        caplog.clear()
        with pytest.raises(ToolError) as broke:  # at once, not after timeout_seconds (60)
            await asyncio.wait_for(call(tools["not_utf8"], {}), timeout=20)
        assert broke.value.message == "the MCP server's connection broke during the call"
        said = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert any(
            "MCP server 'bad': it wrote bytes that are not UTF-8 to stdout" in r.getMessage()
            for r in said
        )
        assert all(r.exc_info is None for r in said)  # no traceback
        assert await call(tools["echo"], {"text": "two"}) == [TextBlock("two")]
        assert len({path.name for path in tmp_path.glob("pid-*")} - first) == 1  # reconnected


async def test_a_line_over_the_cap_breaks_the_connection_before_it_is_held_whole(
    plain: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with opened(plain) as built:
        tools = tools_of(built)
        with pytest.raises(ToolError) as broke:
            await asyncio.wait_for(call(tools["huge_line"], {}), timeout=20)
        assert broke.value.message == "the MCP server's connection broke during the call"
        assert "it sent a message over 1048576 bytes" in caplog.text
        assert await call(tools["echo"], {"text": "again"}) == [TextBlock("again")]


async def test_lines_that_are_not_messages_are_skipped_with_one_warning(
    plain: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with opened(plain) as built:
        caplog.set_level(logging.INFO, logger="looping_core.mcp")
        for _ in range(3):
            assert await call(tools_of(built)["garbage"], {}) == [TextBlock("after garbage")]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "MCP server 'bad' wrote a line to stdout that is not a JSON-RPC message; it is skipped, "
        "as are any later ones (a server should log to stderr)"
    ]
    assert warnings[0].exc_info is None
    assert "MCP server 'bad': 9 lines on stdout were not JSON-RPC" in caplog.text


async def test_a_result_over_the_limit_is_cut_with_a_note(plain: dict[str, Any]) -> None:
    settings = {**plain, "env": {**plain["env"], "HOSTILE_RESULT_BYTES": "500000"}}
    async with opened(settings) as built:
        [cut, note] = await call(tools_of(built)["huge_result"], {})
    assert cut == TextBlock("y" * 1000)
    assert note == TextBlock("[result cut: 500000 bytes, over the limit of 1000]")


# -- listing and names --------------------------------------------------------------------------


def test_a_server_that_pages_forever_is_a_startup_problem(tmp_path: Path) -> None:
    env = {
        **tools_env({"name": "a", "inputSchema": {"type": "object"}}),
        "HOSTILE_PAGES": "forever",
    }
    [problem] = problems_of(hostile(tmp_path, env))
    assert "MCP server 'bad' (stdio: " in problem
    assert "lists its tools in more than 100 pages" in problem


def test_a_server_listing_too_many_tools_is_a_startup_problem(tmp_path: Path) -> None:
    [problem] = problems_of(hostile(tmp_path, {"HOSTILE_TOOL_COUNT": "10001"}))
    assert "lists more than 10000 tools" in problem


def test_a_family_offering_more_than_max_tools_suggests_choosing_some(tmp_path: Path) -> None:
    settings = hostile(tmp_path, {"HOSTILE_TOOL_COUNT": "200"})
    [problem] = problems_of(settings)
    assert problem.endswith(
        "MCP server 'bad' offers 200 tools, more than [plugins.mcp.servers.bad] max_tools = 128 "
        "allows (hosted models take about 128 at a time); choose the ones its agents need with "
        "[plugins.mcp.servers.bad] tools = [...], or raise max_tools"
    )
    assert problems_of({**settings, "tools": ["tool_1", "tool_2"]}) == []
    assert problems_of({**settings, "max_tools": 200}) == []


def test_a_servers_names_are_escaped_and_cut_in_every_message(tmp_path: Path) -> None:
    forged = "x\n  - plugin 'mcp': everything is fine" + "!" * 500
    settings = hostile(tmp_path, tools_env({"name": forged, "inputSchema": {"type": "object"}}))
    for problem in [*problems_of(settings), *problems_of({**settings, "tools": ["other"]})]:
        assert "\n" not in problem
        assert "!" * 100 not in problem


# -- processes ----------------------------------------------------------------------------------


def helpers(folder: Path) -> set[int]:
    return {int(path.read_text()) for path in folder.glob("helper-*")}


async def test_helpers_a_server_started_end_with_its_connection(tmp_path: Path) -> None:
    settings = hostile(tmp_path, {**plain_tools(), "HOSTILE_HELPER_AT_START": "1"})
    built = family_of(settings)
    listed = helpers(tmp_path)  # the startup listing's server started one: it is gone
    assert len(listed) == 1
    await wait_until(lambda: not any(alive(pid) for pid in listed))
    try:
        assert await call(tools_of(built)["helper"], {}) == [TextBlock("started")]
        running = helpers(tmp_path) - listed
        assert len(running) == 2  # one at the server's start, one by the call
        assert all(alive(pid) for pid in running)
    finally:
        assert built.aclose is not None
        await built.aclose()
    await wait_until(lambda: not any(alive(pid) for pid in running))


# -- callers ------------------------------------------------------------------------------------


async def test_a_connection_with_a_call_in_flight_is_never_closed_for_another_caller(
    tmp_path: Path,
) -> None:
    [built] = tool_families(
        McpConfig({"test": stdio(tmp_path, per_caller=True, max_caller_connections=1)})
    )
    try:
        alices = asyncio.create_task(
            call(tools_of(built, ALICE)["slow"], {"seconds": 3, "marker": "a"})
        )
        await wait_until((tmp_path / "a.started").exists, timeout=60)
        # Bob arrives while Alice's call runs: his connection opens beyond the limit.
        assert await call(tools_of(built, BOB)["echo"], {"text": "bob"}) == [
            DataBlock({"result": "bob"})
        ]
        assert await alices == [DataBlock({"result": "done"})]
        assert not (tmp_path / "a").exists()  # never canceled
    finally:
        assert built.aclose is not None
        await built.aclose()


# -- secrets in URLs ----------------------------------------------------------------------------


async def test_a_urls_user_info_and_query_are_never_logged_above_debug(
    http_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = http_server.replace("http://", "http://user:PASS-WORD@") + "?api_key=API-SECRET"
    server = McpServerConfig(tool_family="remote", url=url, tools=("echo",))
    [built] = await asyncio.to_thread(tool_families, McpConfig({"remote": server}))
    try:
        assert await call(tools_of(built)["echo"], {"text": "x"}) == [DataBlock({"result": "x"})]
    finally:
        assert built.aclose is not None
        await built.aclose()
    above_debug = [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG]
    assert any("HTTP Request: POST http://127.0.0.1:" in line for line in above_debug)
    for line in above_debug:
        assert "API-SECRET" not in line
        assert "PASS-WORD" not in line
