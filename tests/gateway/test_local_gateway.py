"""`looping gateway`'s push receiver (`LocalGateway`): a push that fails verification is
refused 401 and its body not kept; a verified one is 200; only the latest pushes are kept."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from looping_core.a2a import SIGNATURE_HEADER, TOKEN_HEADER, SigningKey
from looping_core.a2a._push import PushSigner
from looping_core.gateway import KeyFileExposed, LocalGateway, gateway_key
from looping_core.testing import ed25519_private_jwk

BODY = b'{"task":{"id":"t1"}}'
Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
async def agent_jwks() -> AsyncIterator[tuple[PushSigner, str]]:
    """The agent's signer, and its JWKS served on 127.0.0.1."""
    key = SigningKey.from_jwk(ed25519_private_jwk("agent-1"))
    app = web.Application()
    document = json.dumps({"keys": [key.public_jwk]})

    async def serve_jwks(request: web.Request) -> web.Response:
        return web.Response(text=document, content_type="application/json")

    app.router.add_get("/jwks", serve_jwks)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    try:
        yield PushSigner(key=key, jwks_url=f"{base}/jwks", issuer=base), f"{base}/jwks"
    finally:
        await runner.cleanup()


async def push(
    gateway: LocalGateway, signer: PushSigner | None, jti: str, task_id: str = "t1"
) -> int:
    url = gateway.push_url()
    body = json.dumps({"task": {"id": task_id}}, separators=(",", ":")).encode()
    headers = {
        "Authorization": f"Bearer {gateway.push_credentials}",
        TOKEN_HEADER: gateway.push_token,
        "Content-Type": "application/json",
    }
    if signer is not None:
        headers[SIGNATURE_HEADER] = signer.sign(url=url, task_id=task_id, jti=jti, body=body)
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        return response.status


async def test_an_unsigned_or_forged_push_is_refused_401_and_a_signed_one_accepted(
    agent_jwks: tuple[PushSigner, str],
) -> None:
    signer, jwks_url = agent_jwks
    someone_else = SigningKey.from_jwk(ed25519_private_jwk("agent-1"))  # same kid, other key
    forger = PushSigner(key=someone_else, jwks_url=jwks_url, issuer=signer.issuer)
    async with LocalGateway(ed25519_private_jwk("gw"), agent_jwks_url=jwks_url) as gateway:
        assert await push(gateway, None, "a") == 401
        assert await push(gateway, forger, "b") == 401
        assert await push(gateway, signer, "c") == 200
    statuses = [(p.status, p.error is None, p.body) for p in gateway.pushes]
    assert statuses == [(401, False, b""), (401, False, b""), (200, True, BODY)]


async def test_only_the_latest_pushes_are_kept(agent_jwks: tuple[PushSigner, str]) -> None:
    signer, jwks_url = agent_jwks
    gateway = LocalGateway(ed25519_private_jwk("gw"), agent_jwks_url=jwks_url, max_pushes=10)
    async with gateway:
        for index in range(25):
            assert await push(gateway, signer, f"n-{index}") == 200
    assert len(gateway.pushes) == 10
    assert [p.claims["jti"] for p in gateway.pushes if p.claims] == [
        f"n-{index}" for index in range(15, 25)
    ]


async def test_waiting_for_the_pushes_of_tasks_counts_tasks_not_deliveries(
    agent_jwks: tuple[PushSigner, str],
) -> None:
    """Pushes are at least once: two deliveries of t1's push are not a push of t2, and a
    refused push of t2 is not one either."""
    signer, jwks_url = agent_jwks
    async with LocalGateway(ed25519_private_jwk("gw"), agent_jwks_url=jwks_url) as gateway:
        assert await push(gateway, signer, "once", "t1") == 200
        assert await push(gateway, signer, "once", "t1") == 200  # delivered again
        assert await push(gateway, None, "unsigned", "t2") == 401
        assert len(await gateway.wait_for_pushes(2, timeout=1)) == 2  # counts deliveries
        with pytest.raises(TimeoutError):
            await gateway.wait_for_pushes_of(["t1", "t2"], timeout=0.5)
        assert await push(gateway, signer, "second", "t2") == 200
        by_task = await gateway.wait_for_pushes_of(["t1", "t2"], timeout=5)
    assert {
        task: [p.claims["jti"] for p in pushes if p.claims] for task, pushes in by_task.items()
    } == {
        "t1": ["once", "once"],
        "t2": ["second"],
    }
    assert [p.task_id for p in gateway.pushes] == ["t1", "t1", None, "t2"]  # a refused body is gone


def test_a_gateway_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    first = gateway_key(tmp_path)
    path = tmp_path / "gateway-key.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert gateway_key(tmp_path) == first  # its owner's only: used
    path.chmod(0o644)
    with pytest.raises(KeyFileExposed, match=r"chmod 600 .*gateway-key.json") as refused:
        gateway_key(tmp_path)
    assert "-rw-r--r--" in str(refused.value)
    path.chmod(0o600)
    assert gateway_key(tmp_path) == first


def test_looping_token_refuses_an_exposed_key_in_one_line(looping_cli: Cli, tmp_path: Path) -> None:
    state = tmp_path / "state"
    gateway_key(state)
    (state / "gateway-key.json").chmod(0o640)
    config = tmp_path / "looping.toml"
    config.write_text('[security]\ngateway_origins = ["http://127.0.0.1:8700"]\n')
    result = looping_cli("token", "--config", config, "--state", state, "--tenant", "words")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "open to other users" in result.stderr
