"""No value a client sends can forge a log line or make the log grow by its size: CR/LF and
1 MB values through every field that reaches a line (the tenant of a refused request, the path,
a signed token's claims), in both log formats of a served process; and HTTP too malformed for
aiohttp is the access log's one line, not an ERROR with a traceback."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import aiohttp
import pytest

from looping_core._logs import MAX_MESSAGE, safe
from looping_core.testing import FakeGateway, ed25519_private_jwk

from support.ports import unused_port
from support.served import log_of, serve, write_config

KEY = ed25519_private_jwk("agent-key-1")
FORGED = "\r\n2026-01-01 00:00:00,000 [1] ERROR forged: FORGED"
HUGE = "t" * 1_000_000
MALFORMED = (
    b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # a request line too long
    b"GET / HTTP/1.1\r\nX-Long: " + b"b" * 10_000 + b"\r\n\r\n",  # a header too long
    b"NOT HTTP\x00 AT ALL\r\n\r\n",
)


def test_safe_escapes_control_characters_and_cuts_long_values() -> None:
    assert safe("a\r\nb\tc\x1b[31m\x00\u2028d\x7f\x85") == (
        "a\\r\\nb\\tc\\x1b[31m\\x00\\u2028d\\x7f\\x85"
    )
    assert safe("é and 漢字") == "é and 漢字"  # only what breaks lines or terminals
    assert safe("x" * 201) == "x" * 200 + "...[201 chars]"
    assert safe("x" * 200) == "x" * 200


async def send_hostile_requests(gateway: FakeGateway, port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    endpoint = f"{base}/a2a"
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:

        async def post(url: str, params: dict[str, object], token: str) -> int:
            envelope = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": params}
            sent = {**headers, "Authorization": f"Bearer {token}"}
            async with session.post(url, data=json.dumps(envelope), headers=sent) as response:
                await response.read()
                return response.status

        # Refused before the token verifies: a bad token, and a good one for another tenant.
        for tenant in (FORGED, HUGE + FORGED):
            assert await post(endpoint, {"tenant": tenant, "id": "x"}, "not.a.token") == 401
            good = gateway.token(tenant="bob", aud=endpoint)
            assert await post(endpoint, {"tenant": tenant, "id": "x"}, good) == 401
        # Signed by the gateway, so past the checks: a tenant claim with CR/LF, long.
        odd = "bob" + FORGED + "q" * 4000
        token = gateway.token(tenant=odd, aud=endpoint, sub="s" + FORGED)
        assert await post(endpoint, {"tenant": odd, "id": "x"}, token) == 200
        # The path, percent-decoded in the access log (and a long one, within HTTP's limit).
        for path in ("/a2a%0D%0A2026-01-01%20FORGED", "/x" + "%0A" * 2000):
            async with session.get(base + path) as response:
                assert response.status == 404
        big = {"tenant": "bob", "id": HUGE, "historyLength": FORGED}
        assert await post(endpoint, big, gateway.token(tenant="bob", aud=endpoint)) == 200
    for malformed in MALFORMED:  # HTTP aiohttp itself refuses: 400, and one access line
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(malformed)
        await writer.drain()
        assert (await reader.read(12)).startswith(b"HTTP/1.")
        writer.close()
        await writer.wait_closed()


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_no_client_value_forges_a_line_or_fills_the_log(
    log_format: str, tmp_path: Path, gateway: FakeGateway
) -> None:
    port = unused_port()
    more = f'[observability]\nlog_format = "{log_format}"\n'
    config = write_config(tmp_path / "looping.toml", port, gateway, more=more)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    process = await serve(config, port, KEY)
    try:
        await send_hostile_requests(gateway, port)
    finally:
        process.terminate()
        process.wait(timeout=30)
    log = log_of(config).read_text()
    lines = log.splitlines()
    assert len(log) < 60_000  # megabytes were sent; kilobytes were written
    assert "FORGED" in log  # the values were logged, escaped
    assert all(len(line) <= MAX_MESSAGE + 2000 for line in lines)
    for line in lines:
        if log_format == "json":
            record = json.loads(line)  # every line one whole record
            assert not record["message"].startswith("2026-01-01")
            assert all(len(v) <= MAX_MESSAGE for v in record.values() if isinstance(v, str))
        else:
            assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[\d+\] [A-Z]+ ", line), line
    assert "forged: FORGED" not in [line.partition(" ERROR ")[2] for line in lines]
    assert "Traceback" not in log
    assert not [
        line
        for line in lines
        if re.match(r'\S+ \S+ \[\d+\] ERROR |{"time": "[^"]*", "level": "error"', line)
    ]
    assert len([line for line in lines if '" 400 ' in line or '"status": 400' in line]) == 3
    refusals = [line for line in lines if "gateway token rejected" in line]
    assert len(refusals) == 4
    assert not any("FORGED" in line or "ttt" in line for line in refusals)  # check and peer only
