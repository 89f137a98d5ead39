"""`looping keys` and `looping serve`, as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from looping_core.a2a import SigningKey, verify_card
from looping_core.testing import FakeGateway, config_toml, ed25519_private_jwk, tenant_toml

from support.ports import unused_port

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_keys_prints_a_private_jwk_and_an_env_line(looping_cli: Cli) -> None:
    result = looping_cli("keys", "--kid", "a2a-2026-11-29")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    jwk = json.loads(lines[2])
    assert (jwk["kid"], jwk["kty"], jwk["crv"]) == ("a2a-2026-11-29", "OKP", "Ed25519")
    SigningKey.from_jwk(jwk)
    assert lines[4] == f"A2A_SIGNING_KEY='{lines[2]}'"


def test_keys_quiet_prints_only_the_jwk(looping_cli: Cli) -> None:
    result = looping_cli("keys", "-q")
    assert SigningKey.from_jwk(json.loads(result.stdout)).kid.startswith("a2a-")


def write_config(path: Path, port: int, plugins: str = "", event_loop: str = "auto") -> str:
    path.write_text(
        config_toml(
            port=port,
            gateway_origins=["http://127.0.0.1:9"],
            signing_key_env="LPT_SERVE_KEY",
            store_url=f"sqlite:///{path.parent / 'looping.db'}",
            server=f'event_loop = "{event_loop}"',
            extra=plugins + tenant_toml("alice", "looping_plugins_example.agent:WordCountAgent"),
        )
    )
    return str(path)


def test_serve_refuses_to_start_without_a_signing_key(looping_cli: Cli, tmp_path: Path) -> None:
    config = write_config(tmp_path / "looping.toml", unused_port())
    result = looping_cli("serve", "--config", config, env={"LPT_SERVE_KEY": ""})
    assert result.returncode == 1
    assert result.stderr == (
        "the signing key is read from the environment variable LPT_SERVE_KEY, which is not set; "
        "generate one with `looping keys` and export it\n"
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_with_a_store_it_cannot_reach_says_so_in_one_line_and_never_serves(
    looping_cli: Cli, tmp_path: Path, workers: int
) -> None:
    path = tmp_path / "looping.toml"
    write_config(path, unused_port())
    nowhere = f"postgresql://looping@127.0.0.1:{unused_port()}/agents"
    path.write_text(path.read_text().replace(f"sqlite:///{tmp_path / 'looping.db'}", nowhere))
    result = looping_cli(
        "serve", "--config", str(path), "--workers", str(workers),
        env={"LPT_SERVE_KEY": json.dumps(ed25519_private_jwk("k"))},
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "serving" not in result.stderr  # it never was
    assert result.stderr.splitlines()[-1].startswith("cannot connect to the store: ")
    assert "Connection refused" in result.stderr


def test_serve_refuses_to_start_with_plugin_problems(looping_cli: Cli, tmp_path: Path) -> None:
    plugins = '[plugins]\nenabled = ["no-such-plugin"]\n'
    config = write_config(tmp_path / "looping.toml", unused_port(), plugins)
    result = looping_cli("serve", "--config", config, env={"LPT_SERVE_KEY": "irrelevant"})
    assert result.returncode == 1
    assert result.stderr.startswith("1 plugin problem:\n  - plugin 'no-such-plugin': is selected")


def test_serve_refuses_uvloop_when_it_is_not_installed(looping_cli: Cli, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "uvloop.py").write_text("raise ImportError('not installed here')\n")
    config = write_config(tmp_path / "looping.toml", unused_port(), event_loop="uvloop")
    result = looping_cli("serve", "--config", config, site=site, env={"LPT_SERVE_KEY": "x"})
    assert result.returncode == 1
    assert result.stderr == (
        '[server] event_loop = "uvloop" needs the uvloop package; install it with: '
        "pip install 'looping-core[uvloop]'\n"
    )


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_serve_serves_the_signed_card(tmp_path: Path, event_loop: str) -> None:
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, event_loop=event_loop)
    key = SigningKey.from_jwk(
        json.loads(subprocess.check_output([_script("looping"), "keys", "-q"]))
    )
    environment = dict(os.environ, LPT_SERVE_KEY=json.dumps(_private(key)))
    process = subprocess.Popen(
        [_script("looping"), "serve", "--config", config],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        card = _get_json(f"http://127.0.0.1:{port}/.well-known/agent-card.json", process)
        jwks = _get_json(f"http://127.0.0.1:{port}/.well-known/jwks.json", process)
        verify_card(card, jwks)
        assert card["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{port}/a2a"
    finally:
        process.send_signal(signal.SIGINT)
        _, log = process.communicate(timeout=30)
    assert f"(event loop: {event_loop})" in log


def test_serve_host_and_port_override_the_config_and_the_card_follows(tmp_path: Path) -> None:
    configured, port = unused_port(), unused_port()
    config = write_config(tmp_path / "looping.toml", configured)
    environment = dict(os.environ, LPT_SERVE_KEY=json.dumps(ed25519_private_jwk("k")))
    process = subprocess.Popen(
        [_script("looping"), "serve", "--config", config, "--host", "127.0.0.1", "--port",
         str(port)],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        card = _get_json(f"http://127.0.0.1:{port}/.well-known/agent-card.json", process)
        assert card["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{port}/a2a"
        ready = _get_json(f"http://127.0.0.1:{port}/readyz", process)
        assert ready == {"status": "ready"}
    finally:
        process.send_signal(signal.SIGINT)
        _, log = process.communicate(timeout=30)
    assert f"on 127.0.0.1:{port}" in log


def test_dash_h_is_help(looping_cli: Cli) -> None:
    for arguments in (["-h"], ["serve", "-h"], ["db", "status", "-h"]):
        result = looping_cli(*arguments)
        assert result.returncode == 0, arguments
        assert "Show this message and exit." in result.stdout


def _script(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _private(key: SigningKey) -> dict[str, str]:
    return {**key.key.as_dict(private=True), "kid": key.kid}


def _get_json(url: str, process: subprocess.Popen[str]) -> dict:  # type: ignore[type-arg]
    """Poll until the server answers (it is starting), failing fast if it exits."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            if process.poll() is not None:
                raise AssertionError(f"looping serve exited: {process.communicate()}") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


async def test_json_logs_say_which_request_tenant_caller_and_task_never_the_token(
    tmp_path: Path,
) -> None:
    port = unused_port()
    async with FakeGateway() as gateway:
        path = tmp_path / "looping.toml"
        path.write_text(
            config_toml(
                port=port,
                gateway_origins=[gateway.origin],
                signing_key_env="LPT_SERVE_KEY",
                store_url=f"sqlite:///{tmp_path / 'looping.db'}",
                extra='[observability]\nlog_format = "json"\n'
                + tenant_toml("alice", "looping_plugins_example.agent:WordCountAgent"),
            )
        )
        log = tmp_path / "serve.log"
        environment = dict(os.environ, LPT_SERVE_KEY=json.dumps(ed25519_private_jwk("k")))
        with log.open("wb") as output:
            process = subprocess.Popen(
                [_script("looping"), "serve", "--config", str(path), "--log-level", "info"],
                env=environment, stdout=output, stderr=output,
            )  # fmt: skip
        try:
            endpoint = f"http://127.0.0.1:{port}/a2a"
            await asyncio.to_thread(_get_json, f"http://127.0.0.1:{port}/healthz", process)
            token = gateway.token(tenant="alice", aud=endpoint, sub="ann")
            body = {
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {
                    "tenant": "alice",
                    "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "a b"}]},
                    "configuration": {"taskPushNotificationConfig": gateway.push_config()},
                },
            }  # fmt: skip
            headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0",
                       "X-Request-Id": "req-42"}  # fmt: skip
            async with (
                aiohttp.ClientSession() as session,
                session.post(endpoint, json=body, headers=headers) as response,
            ):
                assert response.headers["X-Request-Id"] == "req-42"
                task_id = (await response.json())["result"]["task"]["id"]
            await gateway.wait_for_pushes(1)
        finally:
            process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(process.wait, 30)
    text = log.read_text()
    assert token not in text
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
    access = [entry for entry in lines if entry["logger"] == "aiohttp.access"]
    sent = next(entry for entry in access if entry.get("request_id") == "req-42")
    assert (sent["method"], sent["path"], sent["status"]) == ("POST", "/a2a", 200)
    assert sent["duration_ms"] > 0
    assert (sent["tenant"], sent["subject"]) == ("alice", "ann")
    [ended] = [entry for entry in lines if "ended" in entry["message"]]
    assert (ended["task_id"], ended["tenant"], ended["subject"]) == (task_id, "alice", "ann")
    assert ended["outcome"] == "completed"
    assert ended["duration_ms"] >= 0
    assert any(entry["message"].startswith("stopping: SIGTERM") for entry in lines)
