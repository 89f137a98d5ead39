"""The built-in `mcp` plugin against real MCP servers written with the official SDK
(tests/mcp/mcp_server.py), over stdio and Streamable HTTP: tools listed and checked at startup,
results mapped to content, errors, timeouts that cancel the call on the server, a server that
crashes mid-call, callers kept apart, connections closed on shutdown, and every startup problem
said in a sentence that names the server and the fix."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from looping_core.config import structure_plugin_config
from looping_core.content import DataBlock, ImageBlock
from looping_core.contract import Tool, ToolCall, ToolContext, ToolError, ToolFamily
from looping_core.mcp import McpConfig, McpServerConfig
from looping_core.mcp._config import config_problems
from looping_core.mcp.plugin import McpStartupProblems, tool_families
from looping_core.testing import ed25519_private_jwk, plugin_problems, tenant_toml

from support.ports import unused_port
from support.processes import alive

SERVER = Path(__file__).with_name("mcp_server.py")
ALICE = ToolContext(tenant="t", instance_id="issuer#alice")
BOB = ToolContext(tenant="t", instance_id="issuer#bob")


def stdio(folder: Path, **settings: Any) -> McpServerConfig:
    return McpServerConfig(
        tool_family=settings.pop("tool_family", "test"),
        command=sys.executable,
        args=(str(SERVER), "stdio"),
        env={"MCP_TEST_FOLDER": str(folder)},
        **settings,
    )


@pytest.fixture
async def family(tmp_path: Path) -> AsyncIterator[ToolFamily]:
    [built] = tool_families(McpConfig({"test": stdio(tmp_path)}))
    try:
        yield built
    finally:
        assert built.aclose is not None
        await built.aclose()


def tools_of(family: ToolFamily, context: ToolContext = ALICE) -> dict[str, Tool]:
    return {tool.name: tool for tool in family.factory(context)}


async def call(tool: Tool, arguments: Mapping[str, Any], call_id: str = "call-1") -> Any:
    return list(await tool.handler(arguments, ToolCall(call_id, tool.name, ALICE)) or ())


def pids(folder: Path) -> set[int]:
    return {int(path.read_text()) for path in folder.glob("pid-*")}


async def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


# -- tools and results -----------------------------------------------------------------------


async def test_a_stdio_servers_tools_are_a_family_with_their_schemas(
    family: ToolFamily,
) -> None:
    assert family.name == "test"
    assert "MCP server 'test'" in family.description
    tools = tools_of(family)
    assert {"add", "echo", "fail", "slow", "crash", "pixel", "call_id", "get_weather"} <= set(tools)
    assert tools["add"].input_schema["required"] == ["a", "b"]
    assert tools["add"].description == "Add two numbers."


async def test_results_map_to_content(family: ToolFamily) -> None:
    tools = tools_of(family)
    # Structured content is data, not also its JSON as text (the SDK's server gives both).
    assert await call(tools["add"], {"a": 2, "b": 3}) == [DataBlock({"sum": 5})]
    assert await call(tools["echo"], {"text": "hi"}) == [DataBlock({"result": "hi"})]
    [image] = await call(tools["pixel"], {})
    assert isinstance(image, ImageBlock)
    assert image.media_type == "image/png"
    assert image.data is not None
    assert image.data.startswith(b"\x89PNG")
    # A camelCase MCP name is called in snake_case; the server gets its own name.
    assert await call(tools["get_weather"], {"city": "Paris"}) == [
        DataBlock({"result": "sunny in Paris"})
    ]


async def test_the_models_call_id_goes_with_the_call(family: ToolFamily) -> None:
    assert await call(tools_of(family)["call_id"], {}, call_id="toolu_42") == [
        DataBlock({"result": "toolu_42"})
    ]


async def test_a_tool_that_fails_is_an_error_result_the_model_sees(family: ToolFamily) -> None:
    with pytest.raises(ToolError) as refused:
        await call(tools_of(family)["fail"], {"reason": "no such city"})
    assert "no such city" in refused.value.message
    # The connection is still good.
    assert await call(tools_of(family)["echo"], {"text": "still here"}) == [
        DataBlock({"result": "still here"})
    ]


async def test_a_call_past_its_timeout_is_canceled_on_the_server(tmp_path: Path) -> None:
    [built] = tool_families(McpConfig({"test": stdio(tmp_path, timeout_seconds=3.0)}))
    try:
        with pytest.raises(ToolError) as refused:
            await call(tools_of(built)["slow"], {"seconds": 30, "marker": "slow-1"})
        assert refused.value.message == "the MCP server did not answer within 3 s"
        await wait_until((tmp_path / "slow-1").exists)
        assert (tmp_path / "slow-1").read_text() == "canceled"
    finally:
        assert built.aclose is not None
        await built.aclose()


async def test_a_canceled_turn_cancels_the_request(family: ToolFamily, tmp_path: Path) -> None:
    running = asyncio.create_task(call(tools_of(family)["slow"], {"seconds": 30, "marker": "c"}))
    await wait_until((tmp_path / "c.started").exists, timeout=60)  # the call is on the server
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await wait_until((tmp_path / "c").exists)


async def test_a_server_that_crashes_mid_call_is_started_again_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    [built] = tool_families(McpConfig({"test": stdio(tmp_path, max_restarts=1)}))
    tools = tools_of(built)
    try:
        assert await call(tools["echo"], {"text": "one"}) == [DataBlock({"result": "one"})]
        first = pids(tmp_path)
        with pytest.raises(ToolError) as broke:
            await call(tools["crash"], {})
        assert broke.value.message == "the MCP server's connection broke during the call"
        # The next call starts the server again.
        assert await call(tools["echo"], {"text": "two"}) == [DataBlock({"result": "two"})]
        assert len(pids(tmp_path) - first) == 1
        with pytest.raises(ToolError):
            await call(tools["crash"], {})
        # Past max_restarts within ten minutes: refused, not started again.
        with pytest.raises(ToolError) as refused:
            await call(tools["echo"], {"text": "three"})
        assert "broke 2 times in ten minutes" in refused.value.message
        assert len(pids(tmp_path) - first) == 1
    finally:
        assert built.aclose is not None
        await built.aclose()


async def test_per_caller_connections_keep_callers_apart(tmp_path: Path) -> None:
    own = tmp_path / "own"
    shared = tmp_path / "shared"
    [per_caller] = tool_families(McpConfig({"test": stdio(own, per_caller=True)}))
    [one] = tool_families(McpConfig({"test": stdio(shared)}))
    listed = pids(own) | pids(shared)  # startup's own connections, closed since
    try:
        for built in (per_caller, one):
            await call(tools_of(built, ALICE)["remember"], {"value": "alice's"})
        # Bob's own server has nothing of Alice's; the shared one does.
        assert await call(tools_of(per_caller, BOB)["recall"], {}) == [DataBlock({"result": []})]
        assert await call(tools_of(one, BOB)["recall"], {}) == [DataBlock({"result": ["alice's"]})]
        assert await call(tools_of(per_caller, ALICE)["recall"], {}) == [
            DataBlock({"result": ["alice's"]})
        ]
        assert len(pids(own) - listed) == 2  # one process per caller
        assert len(pids(shared) - listed) == 1
    finally:
        for built in (per_caller, one):
            assert built.aclose is not None
            await built.aclose()


async def test_closing_the_family_stops_the_servers_process(tmp_path: Path) -> None:
    [built] = tool_families(McpConfig({"test": stdio(tmp_path)}))
    listed = pids(tmp_path)
    await call(tools_of(built)["echo"], {"text": "x"})
    [pid] = pids(tmp_path) - listed
    assert alive(pid)
    assert built.aclose is not None
    await built.aclose()
    await wait_until(lambda: not alive(pid))
    with pytest.raises(ToolError):  # closed for good
        await call(tools_of(built)["echo"], {"text": "y"})


# -- Streamable HTTP -------------------------------------------------------------------------


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = unused_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env={**os.environ, "MCP_TEST_FOLDER": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port)):
                    break
            except OSError:
                assert process.poll() is None, "the MCP server exited"
                assert time.monotonic() < deadline, "the MCP server did not listen"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_a_streamable_http_server_with_a_secret_header(
    http_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LPT_MCP_TOKEN", "Bearer s3cret")
    server = McpServerConfig(
        tool_family="remote",
        url=http_server,
        headers={"Authorization": "env:LPT_MCP_TOKEN"},
        tools=("add", "authorization"),
        prefix="calc",
    )
    [built] = tool_families(McpConfig({"remote": server}))
    try:
        tools = tools_of(built)
        assert set(tools) == {"calc_add", "calc_authorization"}  # the allow-list, prefixed
        assert await call(tools["calc_add"], {"a": 40, "b": 2}) == [DataBlock({"sum": 42})]
        assert await call(tools["calc_authorization"], {}) == [
            DataBlock({"result": "Bearer s3cret"})
        ]
    finally:
        assert built.aclose is not None
        await built.aclose()


# -- startup problems ------------------------------------------------------------------------


def messages(settings: Mapping[str, Any]) -> list[str]:
    return [problem.message for problem in plugin_problems("mcp", settings)]


def test_settings_are_checked_together_naming_each_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LPT_MCP_MISSING", raising=False)
    found = messages({
        "servers": {
            "neither": {"tool_family": "a"},
            "both": {"tool_family": "b", "command": "x", "url": "http://127.0.0.1:1/mcp"},
            "secret": {
                "tool_family": "Bad Name",
                "url": "http://127.0.0.1:1/mcp",
                "headers": {"Authorization": "env:LPT_MCP_MISSING"},
                "timeout_seconds": 0,
                "connect_timeout_seconds": -1,
            },
        }
    })  # fmt: skip
    assert len(found) == 6, found
    assert all(line.startswith("plugin 'mcp' (looping-core ") for line in found)
    text = "\n".join(found)
    assert "[plugins.mcp.servers.neither] needs either `command`" in text
    assert "[plugins.mcp.servers.both] needs either `command`" in text
    assert "[plugins.mcp.servers.secret] tool_family must be 1-63 lowercase" in text
    assert "[plugins.mcp.servers.secret] timeout_seconds must be more than 0" in text
    assert "[plugins.mcp.servers.secret] connect_timeout_seconds must be more than 0" in text
    assert (
        "[plugins.mcp.servers.secret] headers.Authorization is read from the environment "
        "variable LPT_MCP_MISSING, which is not set; export LPT_MCP_MISSING before starting"
    ) in text
    assert "Fix the plugin" not in text  # the server's settings are the fix, not the plugin


def test_an_unknown_key_is_refused_by_name() -> None:
    [problem] = messages({"servers": {"x": {"tool_family": "a", "comand": "x"}}})
    assert "extra fields found (comand: did you mean command?)" in problem
    assert "$.plugins.mcp.servers['x']" in problem


def test_a_server_that_cannot_start_is_a_startup_problem_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-program"
    [problem] = messages({"servers": {"gone": {"tool_family": "gone", "command": str(missing)}}})
    assert f"MCP server 'gone' (stdio: {missing}) could not be reached:" in problem
    assert 'set on_failure = "warn" there to start without its tools' in problem


def test_a_servers_url_is_never_shown_with_its_secrets() -> None:
    url = "http://user:pw@127.0.0.1:9/mcp?key=s3cret#x"
    [problem] = messages({"servers": {"remote": {"tool_family": "r", "url": url}}})
    assert "MCP server 'remote' (http://127.0.0.1:9/mcp) could not be reached" in problem
    assert "s3cret" not in problem
    assert "pw" not in problem


def test_a_server_that_does_not_answer_in_time(tmp_path: Path) -> None:
    settings = {
        "tool_family": "mute", "command": "sleep", "args": ["30"], "connect_timeout_seconds": 1
    }  # fmt: skip
    [problem] = messages({"servers": {"mute": settings}})
    assert "MCP server 'mute' (stdio: sleep) did not answer within 1 s" in problem


def test_with_on_failure_warn_the_family_is_offered_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = McpServerConfig(
        tool_family="maybe", command=str(tmp_path / "nothing"), on_failure="warn"
    )
    with caplog.at_level(logging.WARNING, logger="looping_core.mcp"):
        [built] = tool_families(McpConfig({"maybe": server}))
    assert built.factory(ALICE) == []
    assert "MCP server 'maybe'" in caplog.text
    assert "offered without tools" in caplog.text


def test_the_allow_list_names_only_tools_the_server_has(tmp_path: Path) -> None:
    settings = {
        "tool_family": "test",
        "command": sys.executable,
        "args": [str(SERVER), "stdio"],
        "env": {"MCP_TEST_FOLDER": str(tmp_path)},
        "tools": ["add", "subtract"],
    }
    [problem] = messages({"servers": {"calc": settings}})
    assert "[plugins.mcp.servers.calc] tools names 'subtract', which MCP server 'calc'" in problem
    assert "(it offers: 'add', 'authorization', 'call_id', 'crash'" in problem


async def test_a_servers_tools_can_be_marked_to_wait_for_the_callers_approval(
    tmp_path: Path,
) -> None:
    server = stdio(tmp_path, requires_approval=("add",), idempotent=("echo",))
    [some] = tool_families(McpConfig({"test": server}))
    everything = stdio(tmp_path, tool_family="all", requires_approval=("*",))
    [every] = tool_families(McpConfig({"all": everything}))
    try:
        tools = tools_of(some)
        assert tools["add"].requires_approval is True
        assert tools["echo"].requires_approval is False
        assert (tools["echo"].idempotent, tools["add"].idempotent) == (True, False)
        assert all(tool.requires_approval is True for tool in tools_of(every).values())
    finally:
        for family in (some, every):
            assert family.aclose is not None
            await family.aclose()


def test_only_tools_the_server_has_can_be_marked(tmp_path: Path) -> None:
    settings = {
        "tool_family": "test",
        "command": sys.executable,
        "args": [str(SERVER), "stdio"],
        "env": {"MCP_TEST_FOLDER": str(tmp_path)},
        "requires_approval": ["transfer"],
    }
    [problem] = messages({"servers": {"calc": settings}})
    assert (
        "[plugins.mcp.servers.calc] requires_approval names 'transfer', which MCP server 'calc' "
        "does not offer (it offers: 'add'"
    ) in problem


def test_problems_are_one_error_listing_every_one() -> None:
    with pytest.raises(McpStartupProblems) as raised:
        tool_families(McpConfig({"a": McpServerConfig(tool_family="a")}))
    assert raised.value.problem_lines() == [
        "[plugins.mcp.servers.a] needs either `command` (a stdio server) or `url` (Streamable "
        "HTTP), not both and not neither"
    ]


# -- the guide -------------------------------------------------------------------------------

GUIDE = Path(__file__).parents[2] / "docs" / "mcp.md"


def test_the_guides_example_is_a_valid_config() -> None:
    text = GUIDE.read_text()
    block = text.split("<!-- mcp-example -->\n```toml\n", 1)[1].split("```", 1)[0]
    raw = tomllib.loads(block)
    settings, problems = structure_plugin_config(raw["plugins"]["mcp"], McpConfig, "$.plugins.mcp")
    assert problems == []
    assert config_problems(settings, {"TICKETS_TOKEN": "Bearer x"}) == []
    assert raw["tenants"]["helpdesk"]["plugins"] == ["mcp"]


def test_the_guide_has_a_row_for_every_setting() -> None:
    table = GUIDE.read_text().split("| key | default | what |", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"`([a-z_]+)`", "\n".join(
        row.split(" | ")[0] for row in table.splitlines() if row.startswith("| `")
    )))  # fmt: skip
    assert documented == {field.name for field in attrs.fields(McpServerConfig)}


def test_nothing_of_it_is_imported_unless_selected() -> None:
    """Installed with core, but a config that does not select it never imports it (nor the
    SDK): loading the example config's plugins and the server and CLI leaves both out."""
    script = (
        "import sys\n"
        "from looping_core.config import load_config\n"
        "from looping_core.plugins import PluginHost\n"
        "PluginHost.load(load_config('examples/looping.toml'))\n"
        "import looping_core.server, looping_core.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp'"
        " or m.startswith('looping_core.mcp')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=Path(__file__).parents[2], capture_output=True,
        text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_the_sdk_it_is_listed_and_selecting_it_says_what_to_install() -> None:
    script = (
        "import sys\n"
        "class NoSdk:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('mcp', 'httpx2'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoSdk())\n"
        "from looping_core.plugins import list_plugins\n"
        "from looping_core.testing import plugin_problems\n"
        "[row] = [row for row in list_plugins() if row.key == 'mcp']\n"
        "print(row.error)\n"
        "settings = {'servers': {'x': {'tool_family': 'x', 'command': 'true'}}}\n"
        "print(plugin_problems('mcp', settings)[0].message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    listed_error, problem = done.stdout.splitlines()
    assert listed_error == "None"  # listing it needs no SDK
    assert "the MCP SDK is not installed" in problem
    assert "pip install 'looping-core[mcp]'" in problem


def _guide_block(marker: str, language: str) -> str:
    text = GUIDE.read_text()
    return text.split(f"<!-- {marker} -->\n```{language}\n", 1)[1].split("```", 1)[0]


def test_the_guides_python_server_is_listed_from_the_configs_folder(tmp_path: Path) -> None:
    """The guide's ten-line `MCPServer` and its config, saved in a folder with a `.venv` of its
    own, checked by `looping check` run from another folder: the relative `command` and the
    script in `args` are the config folder's."""
    project = tmp_path / "project"
    venv = Path(sys.prefix)  # this suite's venv, standing in for the project's own
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (project / ".venv" / "lib").symlink_to(venv / "lib")
    (project / ".venv" / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    (project / "weather.py").write_text(_guide_block("mcp-server", "python"))
    config = _guide_block("mcp-server-config", "toml") + tenant_toml(
        "forecaster", "looping_plugins_example.agent:WordCountAgent", 'plugins = ["mcp"]'
    )
    (project / "looping.toml").write_text(config)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, A2A_SIGNING_KEY=json.dumps(ed25519_private_jwk("k")))
    checked = subprocess.run(
        [str(Path(sys.executable).with_name("looping")), "check", "--config",
         str(project / "looping.toml")],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Tenants: forecaster." in checked.stdout


def test_a_servers_folder_is_the_config_files_unless_it_says(tmp_path: Path) -> None:
    raw = {"servers": {
        "default": {"tool_family": "a", "command": "true"},
        "relative": {"tool_family": "b", "command": "true", "cwd": "servers/b"},
        "absolute": {"tool_family": "c", "command": "true", "cwd": "/srv/c"},
    }}  # fmt: skip
    settings, problems = structure_plugin_config(raw, McpConfig, "$.plugins.mcp", tmp_path)
    assert problems == []
    folders = {name: server.cwd for name, server in settings.servers.items()}
    assert folders == {
        "default": str(tmp_path),
        "relative": str(tmp_path / "servers" / "b"),
        "absolute": "/srv/c",
    }
