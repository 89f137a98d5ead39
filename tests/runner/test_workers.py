"""`looping serve --workers N`: worker processes on one port and one SQLite store.

Each test runs a real supervisor with real workers, the fake gateway sending turns and verifying
every push, and kills processes with real signals.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from looping_core.server._serving import RESTART_LIMIT
from looping_core.testing import FakeGateway, ed25519_private_jwk

from support.ports import unused_port
from support.served import (
    children,
    has_exited,
    log_of,
    serve,
    start,
    wait_for,
    wait_until_all_listen,
    write_config,
)

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

KEY = ed25519_private_jwk("agent-key-1")


def rows(config: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(config.parent / "looping.db") as connection:
        return connection.execute(query).fetchall()


async def wait_until_exited(pids: list[int], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not all(has_exited(pid) for pid in pids):
            await asyncio.sleep(0.05)


async def worker_pid(config: Path, *, slot: int, generation: int) -> int:
    """The pid of the `generation`-th worker started in `slot` (0: the first), from the log."""
    started = re.compile(rf"worker {slot} serving \(pid (\d+)\)")
    async with asyncio.timeout(30):
        while len(pids := started.findall(log_of(config).read_text())) <= generation:
            await asyncio.sleep(0.02)
    return int(pids[generation])


def stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


async def send_turns(gateway: FakeGateway, endpoint: str, texts: list[str]) -> list[str]:
    """Send the turns concurrently, each on its own connection; return their task ids."""
    replies = await asyncio.gather(
        *(gateway.send_turn(endpoint, tenant="bob", text=text) for text in texts)
    )
    assert all(status == 200 for status, _ in replies), replies
    return [body["result"]["task"]["id"] for _, body in replies]


async def test_two_workers_share_the_port_and_each_delivers_what_it_ran(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=2)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    released = tmp_path / "released"
    released.touch()
    server = await serve(config, port, KEY)
    try:
        await wait_until_all_listen(server, port, 2)
        task_ids = await send_turns(
            gateway, f"http://127.0.0.1:{port}/a2a", [f"file:{released}"] * 40
        )
        pushes = await gateway.wait_for_pushes(40, timeout=60)
    finally:
        stop(server)
    assert [push.error for push in pushes] == [None] * 40
    assert sorted(push.json["task"]["id"] for push in pushes) == sorted(task_ids)
    assert {push.json["task"]["status"]["state"] for push in pushes} == {"TASK_STATE_COMPLETED"}
    assert len({push.claims["jti"] for push in pushes if push.claims}) == 40
    # The kernel spread the 40 connections over both workers (all on one: odds of 2 in 2**40).
    assert sorted(rows(config, "SELECT worker, COUNT(*) > 0 FROM tasks GROUP BY worker")) == [
        (0, 1),
        (1, 1),
    ]
    assert rows(config, "SELECT DISTINCT worker = (SELECT worker FROM tasks t WHERE t.id ="
                " o.task_id) FROM push_outbox o") == [(1,)]  # fmt: skip
    assert rows(config, "SELECT DISTINCT state FROM push_outbox") == [("delivered",)]
    assert "with 2 workers (event loop: uvloop)" in log_of(config).read_text()


async def test_killed_workers_are_replaced_and_their_turns_resumed(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=2, event_loop="asyncio")
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    releases = [tmp_path / f"release-{n}" for n in range(6)]
    server = await serve(config, port, KEY)
    try:
        first = children(server)
        task_ids = await send_turns(
            gateway, f"http://127.0.0.1:{port}/a2a", [f"file:{path}" for path in releases]
        )
        for path in releases:
            await wait_for(Path(f"{path}.started"))  # every turn is running
        for pid in first:
            os.kill(pid, signal.SIGKILL)
        await wait_until_exited(first)
        assert gateway.pushes == []
        for path in releases:
            path.touch()  # resumed turns finish at once
        pushes = await gateway.wait_for_pushes(6, timeout=60)
        assert not set(first) & set(children(server))
        assert len(children(server)) == 2
    finally:
        stop(server)
    assert sorted(push.json["task"]["id"] for push in pushes) == sorted(task_ids)
    assert {push.json["task"]["status"]["state"] for push in pushes} == {"TASK_STATE_COMPLETED"}
    log = log_of(config).read_text()
    for pid in first:
        assert f"(pid {pid}) was killed by SIGKILL; starting a new one" in log


async def test_a_restart_with_fewer_workers_adopts_the_missing_slots(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    """The whole server dies (SIGKILL to every process) with turns running; it comes back with
    fewer workers than before, and the turns of the slots that are gone still end."""
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=2)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    releases = [tmp_path / f"release-{n}" for n in range(4)]
    server = await serve(config, port, KEY)
    task_ids = await send_turns(
        gateway, f"http://127.0.0.1:{port}/a2a", [f"file:{path}" for path in releases]
    )
    for path in releases:
        await wait_for(Path(f"{path}.started"))
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=30)
    with sqlite3.connect(tmp_path / "looping.db") as connection:  # as if 6 workers had run them
        connection.execute("UPDATE tasks SET worker = 5")
    for path in releases:
        path.touch()
    again = await serve(config, port, KEY, "--workers", "3")
    try:
        pushes = await gateway.wait_for_pushes(4, timeout=60)
    finally:
        stop(again)
    assert sorted(push.json["task"]["id"] for push in pushes) == sorted(task_ids)
    assert {push.json["task"]["status"]["state"] for push in pushes} == {"TASK_STATE_COMPLETED"}
    assert rows(config, "SELECT DISTINCT worker FROM tasks") == [(2,)]  # 5 mod 3


@pytest.mark.parametrize("how", ["SIGTERM to the supervisor", "Ctrl-C to the process group"])
async def test_a_stop_signal_stops_the_workers_gracefully_then_the_supervisor(
    tmp_path: Path, gateway: FakeGateway, how: str
) -> None:
    """Workers finish the requests in flight; a Ctrl-C reaching every process at once (and the
    supervisor's own SIGTERM after it) stops each worker once, never cutting its shutdown."""
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=3)
    server = await serve(config, port, KEY)
    workers = children(server)
    assert len(workers) == 3
    held = tmp_path / "held"
    in_flight = asyncio.ensure_future(
        gateway.send_turn(
            f"http://127.0.0.1:{port}/a2a",
            tenant="bob",
            text=f"file:{held}",
            inbox=None,
            return_immediately=False,  # the answer waits up to max_wait_seconds (2 s)
        )
    )
    await wait_for(Path(f"{held}.started"))
    if how.startswith("SIGTERM"):
        server.send_signal(signal.SIGTERM)
    else:
        os.killpg(server.pid, signal.SIGINT)
    status, body = await in_flight
    assert status == 200, body
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert server.wait(timeout=30) == 0
    await wait_until_exited(workers)
    log = log_of(config).read_text()
    assert "every worker has stopped" in log
    assert "starting a new one" not in log
    assert "Traceback" not in log


async def test_workers_stop_when_their_supervisor_is_killed(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=2)
    server = await serve(config, port, KEY)
    workers = children(server)
    server.send_signal(signal.SIGKILL)
    server.wait(timeout=30)
    await wait_until_exited(workers)
    assert log_of(config).read_text().count("the supervisor is gone; stopping") == 2


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_a_port_already_in_use_is_refused_before_anything_starts(
    tmp_path: Path, gateway: FakeGateway, workers: str
) -> None:
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=2)
    first = await serve(config, port, KEY)
    try:
        second = start(config, KEY, "--workers", workers)
        assert second.wait(timeout=60) == 1
    finally:
        stop(first)
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in (
        log_of(config).read_text()
    )


async def test_a_worker_that_keeps_dying_stops_the_server(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=2)
    server = await serve(config, port, KEY)
    try:
        for death in range(RESTART_LIMIT):
            victim = await worker_pid(config, slot=0, generation=death)
            os.kill(victim, signal.SIGKILL)
            await wait_until_exited([victim])
        assert server.wait(timeout=30) == 1
    finally:
        stop(server)
    log = log_of(config).read_text()
    assert f"died {RESTART_LIMIT} times within 60 s" in log
    assert "stopping the server" in log


async def test_a_stop_while_workers_are_replaced_leaves_no_worker_behind(
    tmp_path: Path, gateway: FakeGateway
) -> None:
    """SIGTERM reaches the supervisor while it forks replacements for workers just killed:
    every worker, old or new, still stops."""
    port = unused_port()
    config = write_config(tmp_path / "looping.toml", port, gateway, workers=4)
    server = await serve(config, port, KEY)
    everyone = set(children(server))
    for pid in everyone:
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):  # stop in the middle of the replacements
        everyone |= set(children(server))
        if len(everyone) > 4:
            break
        await asyncio.sleep(0.002)
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0
    await wait_until_exited(sorted(everyone))
    for line in log_of(config).read_text().splitlines():
        if match := re.search(r"worker \d+ serving \(pid (\d+)\)", line):
            assert has_exited(int(match[1])), line
