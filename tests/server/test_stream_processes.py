"""A stream resumed on another server process than the one running the turn: two `looping
serve` processes on one SQLite store, each its own node; the turn runs on the first, the client
reads from the second, drops, and resumes there with `Last-Event-ID` while the turn goes on."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from looping_core.testing import FakeGateway, config_toml, ed25519_private_jwk, tenant_toml

from support.ports import unused_ports
from support.served import KEY_VARIABLE, serve
from support.sse import SseEvent, open_stream

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

KEY = ed25519_private_jwk("agent-key-1")


def write_server(folder: Path, port: int, node: str, store: Path, gateway: FakeGateway) -> Path:
    folder.mkdir()
    path = folder / "looping.toml"
    path.write_text(
        config_toml(
            port=port,
            gateway_origins=[gateway.origin],
            signing_key_env=KEY_VARIABLE,
            store_url=f"sqlite:///{store}",
            server=f'node = "{node}"',
            extra="[streaming]\npoll_seconds = 0.05\n"
            + tenant_toml("steps", "support.agents:ProgressAgent"),
        )
    )
    return path


def stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


async def test_a_stream_resumes_on_another_process_in_the_middle_of_a_turn(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    store = tmp_path / "looping.db"
    port_a, port_b = unused_ports(2)
    runs = await serve(write_server(tmp_path / "a", port_a, "a", store, gateway), port_a, KEY)
    try:
        reads = await serve(write_server(tmp_path / "b", port_b, "b", store, gateway), port_b, KEY)
        try:
            endpoint_a = f"http://127.0.0.1:{port_a}/a2a"
            endpoint_b = f"http://127.0.0.1:{port_b}/a2a"
            hold = tmp_path / "hold"
            _, body = await gateway.send_turn(endpoint_a, tenant="steps", text=f"steps:file:{hold}")
            task_id = body["result"]["task"]["id"]
            subscribe = {"id": task_id}
            seen: list[SseEvent] = []
            async with open_stream(
                endpoint_b, gateway, "SubscribeToTask", subscribe, tenant="steps"
            ) as first:
                while True:  # until the turn says it is writing (then it holds)
                    event = await first.next()
                    assert event is not None
                    seen.append(event)
                    holder = event.result.get("statusUpdate") or event.result.get("task") or {}
                    message = holder.get("status", {}).get("message", {})
                    if message.get("parts") == [{"text": "writing"}]:
                        break
            hold.touch()  # the turn goes on in process a while nobody listens
            async with open_stream(
                endpoint_b,
                gateway,
                "SubscribeToTask",
                subscribe,
                tenant="steps",
                last_event_id=seen[-1].id,
            ) as resumed:
                rest = await resumed.rest()
            # Every event once, none lost: the same as all of them read back from process a.
            async with open_stream(
                endpoint_a, gateway, "SubscribeToTask", subscribe, tenant="steps", last_event_id="0"
            ) as everything:
                all_events = await everything.rest()
        finally:
            stop(reads)
    finally:
        stop(runs)
    ids = [int(e.id or -1) for e in seen[1:] + rest]
    assert ids == list(range(int(seen[0].id or 0) + 1, ids[-1] + 1))
    assert rest[-1].state == "TASK_STATE_COMPLETED"
    assert [e.data["result"] for e in all_events if int(e.id or 0) > int(seen[-1].id or 0)] == [
        e.data["result"] for e in rest
    ]
    assert [int(e.id or -1) for e in all_events] == list(range(1, ids[-1] + 1))
