"""An agent reaches an MCP server's tools with config only: `looping serve` with the `mcp`
plugin selected and a `LoopingAgent` tenant; the gateway sends a turn, the model calls the
server's tool, its result goes back to the model, and the answer comes back in the push. When
the server stops, the MCP server's process stops with it."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from looping_core.a2a import generate_signing_key
from looping_core.testing import FakeGateway, FakeModelServer, Reply, config_toml, tenant_toml

from support.ports import unused_port
from support.processes import alive, start_looping, stop, wait_for_url

pytestmark = pytest.mark.slow  # a served process of its own

SERVER = Path(__file__).with_name("mcp_server.py")
KEY = {"LPT_MCP_KEY": json.dumps(generate_signing_key("agent-key"))}


@pytest.fixture
async def model_server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


def config(folder: Path, port: int, gateway: FakeGateway, model_url: str) -> Path:
    mcp_folder = folder / "mcp"
    extra = f"""
[plugins]
enabled = ["mcp"]

[plugins.mcp.servers.weather]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SERVER))}, "stdio"]
env = {{ MCP_TEST_FOLDER = {json.dumps(str(mcp_folder))}, MCP_TEST_HELPER = "1" }}
tool_family = "weather"
tools = ["getWeather", "pixel"]
""" + tenant_toml(
        "forecaster",
        "support.agents:ToolsAgent",
        f'plugins = ["mcp"]\n[tenants.forecaster.model]\nmodel = "m"\nbase_url = "{model_url}"\n'
        "max_retries = 0\n",
    )
    path = folder / "looping.toml"
    path.write_text(
        config_toml(
            port=port,
            gateway_origins=[gateway.origin],
            signing_key_env="LPT_MCP_KEY",
            store_url=f"sqlite:///{folder / 'looping.db'}",
            extra=extra,
        )
    )
    return path


async def test_a_looping_agent_calls_an_mcp_tool_through_looping_serve(
    tmp_path: Path, gateway: FakeGateway, model_server: FakeModelServer
) -> None:
    model_server.replies += [
        Reply.tool_calls(("call-7", "get_weather", {"city": "Paris"}), ("call-8", "pixel", {})),
        Reply.text("It is sunny in Paris."),
    ]
    port = unused_port()
    path = config(tmp_path, port, gateway, model_server.base_url)
    log = tmp_path / "serve.log"
    agents = str(Path(__file__).parents[1])  # where `support` lives
    process = start_looping(
        "serve", "--config", str(path), env={**KEY, "PYTHONPATH": agents}, log=log
    )
    try:
        wait_for_url(f"http://127.0.0.1:{port}/.well-known/jwks.json", process, log)
        gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
        endpoint = f"http://127.0.0.1:{port}/a2a"
        status, _ = await gateway.send_turn(endpoint, tenant="forecaster", text="Weather in Paris?")
        assert status == 200
        [push] = await gateway.wait_for_pushes(1, timeout=60)
        assert push.error is None, push.error
        task = push.json["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", log.read_text()
        assert task["artifacts"][0]["parts"] == [{"text": "It is sunny in Paris."}]
        # The model was offered the server's tool, and read its result.
        offered = [tool["function"]["name"] for tool in model_server.requests[0]["tools"]]
        assert offered == ["get_weather", "pixel"]
        weather, pixel, image = model_server.requests[1]["messages"][-3:]
        assert (weather["role"], weather["tool_call_id"]) == ("tool", "call-7")
        assert json.loads(weather["content"]) == {"result": "sunny in Paris"}
        # The image a tool returned reaches the model, after the tool messages.
        assert (pixel["role"], pixel["tool_call_id"], pixel["content"]) == ("tool", "call-8", "")
        assert image["role"] == "user"
        [part] = image["content"]
        assert part["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
        running = [int(p.read_text()) for p in (tmp_path / "mcp").glob("pid-*")]
        assert len(running) == 2  # startup's listing (closed since) and the serving connection
        helpers = [int(p.read_text()) for p in (tmp_path / "mcp").glob("helper-*")]
        assert len(helpers) == 2  # each started a helper process of its own
        running += helpers
    finally:
        stop(process)
    # Stopping the server stopped the MCP server's process, and every process it started.
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in running):
        assert time.monotonic() < deadline, "the MCP server's process outlived the agent"
        time.sleep(0.05)


def test_looping_check_connects_the_servers_and_names_one_it_cannot_reach(
    tmp_path: Path, gateway: FakeGateway, looping_cli: Any
) -> None:
    path = config(tmp_path, unused_port(), gateway, "http://127.0.0.1:9/v1")
    agents = str(Path(__file__).parents[1])
    good = looping_cli("check", "--config", str(path), env={**KEY, "PYTHONPATH": agents})
    assert good.returncode == 0, good.stdout + good.stderr
    text = path.read_text().replace(json.dumps(sys.executable), '"no-such-mcp-server"', 1)
    path.write_text(text)
    bad = looping_cli("check", "--config", str(path), env={**KEY, "PYTHONPATH": agents})
    assert bad.returncode == 1
    said = bad.stdout + bad.stderr
    assert "plugin 'mcp' (looping-core " in said
    assert "MCP server 'weather' (stdio: no-such-mcp-server) could not be reached" in said
