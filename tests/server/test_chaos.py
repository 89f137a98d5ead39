"""Outages as a routine: PostgreSQL restarted again and again, at random, under a steady load of
turns, with `looping serve` running the jobs and with an edge and a `looping worker`.

Afterwards every accepted task has ended once (one terminal event), its agent ran once (each
turn waits out an outage instead of being cut and run again), its push was delivered at least
once and every delivery of it carried the same `jti`, no process exited, and readiness followed
the database (503 while it was down, 200 again once it was back).

Short by default (`CHAOS_SECONDS`, about 20 s of restarts per mode); `LOOPING_CHAOS_SECONDS=1200`
runs twenty minutes per mode, with longer outages and gaps (with `LOOPING_TEST_HANG_SECONDS=0`:
the suite's watchdog stops any test after 300 s).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import time
from pathlib import Path

import aiohttp
import pytest

from looping_core.a2a import TaskState
from looping_core.runner.internal import OUTAGE_PATIENCE_SECONDS
from looping_core.testing import FakeGateway, ed25519_private_jwk

from support.engine import Processes, engine_config, rows
from support.pg_server import PostgresServer
from support.ports import unused_port
from support.served import serve, start_worker

# Processes of their own (see tests/conftest.py), and outages timed against a loaded machine:
# run alone, after the parallel run (the README's test command).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

KEY = ed25519_private_jwk("agent-key-1")
CHAOS_SECONDS = float(os.environ.get("LOOPING_CHAOS_SECONDS", "20"))
LONG = CHAOS_SECONDS > 120
GAP_SECONDS = (3.0, 30.0) if LONG else (3.0, 7.0)
"""Between one restart's end and the next stop."""
DOWN_SECONDS = (1.0, 10.0) if LONG else (1.0, 5.0)
SEND_EVERY_SECONDS = 0.1
TERMINAL = ("COMPLETED", "FAILED", "CANCELED", "REJECTED")
CHAOS = """
[runner]
on_restart = "resume"
serve_runs_jobs = {runs}
heartbeat_seconds = 1
stalled_after_seconds = 20
sweep_seconds = 1
"""


class Load:
    """A turn every `SEND_EVERY_SECONDS` (each takes 0.2-2 s), as a gateway sends them."""

    def __init__(self, gateway: FakeGateway, endpoint: str, folder: Path) -> None:
        self.gateway, self.endpoint, self.folder = gateway, endpoint, folder
        self.accepted: list[str] = []
        self.refused: collections.Counter[tuple[int, str]] = collections.Counter()
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        sends: set[asyncio.Task[None]] = set()
        while not self.stopped.is_set():
            send = asyncio.create_task(self.send())
            sends.add(send)
            send.add_done_callback(sends.discard)
            await asyncio.sleep(SEND_EVERY_SECONDS)
        await asyncio.gather(*sends)

    async def send(self) -> None:
        seconds = random.uniform(0.2, 2.0)
        text = f"steady:{self.folder}:{seconds:.2f}"
        try:
            status, body = await self.gateway.send_turn(self.endpoint, tenant="bob", text=text)
        except (aiohttp.ClientError, TimeoutError):
            self.refused[(0, "no answer")] += 1
            return
        if status == 200:
            self.accepted.append(body["result"]["task"]["id"])
        else:
            self.refused[(status, body["error"]["data"][0]["reason"])] += 1


class Readiness:
    """`/readyz` looked at every 0.2 s: when it said what."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.seen: list[tuple[float, int]] = []
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        async with aiohttp.ClientSession() as session:
            while not self.stopped.is_set():
                try:
                    async with (
                        asyncio.timeout(2),
                        session.get(f"http://127.0.0.1:{self.port}/readyz") as response,
                    ):
                        self.seen.append((time.monotonic(), response.status))
                except (aiohttp.ClientError, TimeoutError):
                    self.seen.append((time.monotonic(), 0))
                await asyncio.sleep(0.2)

    def during(self, start: float, end: float) -> set[int]:
        return {status for at, status in self.seen if start <= at <= end}

    def followed(self, outages: list[tuple[float, float]]) -> None:
        """Not ready while the store was down, ready again within 30 s of its return."""
        for stopped, started in outages:
            if started - stopped > 3:  # pg_ctl returns once the server is up again: a margin
                seen = self.during(stopped + 1.5, started - 1)
                assert seen, "readiness was not looked at while the store was down"
                assert 200 not in seen, "ready while the store was down"
            assert 200 in self.during(started, started + 30), "not ready again after the outage"


async def restart_again_and_again(
    postgres: PostgresServer, until: float
) -> list[tuple[float, float]]:
    """Stop PostgreSQL (fast or immediate) and start it again, at random, until `until`; the
    outages (stopped, started) in monotonic time."""
    outages = []
    while time.monotonic() < until:
        await asyncio.sleep(random.uniform(*GAP_SECONDS))
        stopped = time.monotonic()  # from the stop's start: a fast one may take its time
        await asyncio.to_thread(postgres.stop_surely, random.choice(("fast", "immediate")))
        await asyncio.sleep(random.uniform(*DOWN_SECONDS))
        await asyncio.to_thread(postgres.start)
        outages.append((stopped, time.monotonic()))
    return outages


def terminal_events(store: str) -> collections.Counter[str]:
    """How many terminal status events each task has."""
    counts: collections.Counter[str] = collections.Counter()
    for task_id, body in rows(store, "SELECT task_id, body FROM task_events"):
        update = json.loads(str(body)).get("statusUpdate")
        if update and update["status"]["state"].removeprefix("TASK_STATE_") in TERMINAL:
            counts[str(task_id)] += 1
    return counts


def chaos_config(tmp_path: Path, port: int, gateway: FakeGateway, store: str, mode: str) -> Path:
    """The engine's config with production-like heartbeats, and bob a SteadyAgent."""
    config = engine_config(tmp_path, "edge", port, gateway, store, runs=mode == "serve")
    text = config.read_text()
    runner = text.index("[runner]")
    end = text.find("\n[", runner + 1)
    text = text[:runner] + CHAOS.format(runs=str(mode == "serve").lower())[1:] + text[end + 1 :]
    config.write_text(text.replace("HoldingAgent", "SteadyAgent"))
    return config


@pytest.mark.parametrize("mode", ["serve", "worker"])
async def test_postgresql_restarted_again_and_again_under_load_loses_and_repeats_nothing(
    mode: str,
    tmp_path: Path,
    gateway: FakeGateway,
    own_postgres: PostgresServer,
    processes: Processes,
) -> None:
    store = own_postgres.create_database()
    port = unused_port()
    config = chaos_config(tmp_path, port, gateway, store, mode)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    running = [processes.add(await serve(config, port, KEY))]
    if mode == "worker":
        running.append(processes.add(await start_worker(config, KEY, tmp_path / "worker.log")))
    load = Load(gateway, f"http://127.0.0.1:{port}/a2a", tmp_path)
    readiness = Readiness(port)
    loading = asyncio.create_task(load.run())
    watching = asyncio.create_task(readiness.run())
    outages = await restart_again_and_again(own_postgres, time.monotonic() + CHAOS_SECONDS)
    await asyncio.sleep(3)  # a last steady spell
    load.stopped.set()
    await loading

    async with asyncio.timeout(120):  # every accepted turn ends
        unsettled = "SELECT COUNT(*) FROM tasks WHERE state IN (1, 2)"
        while rows(store, unsettled) != [(0,)]:
            await asyncio.sleep(0.2)
    readiness.stopped.set()
    await watching

    states = dict(rows(store, "SELECT id, state FROM tasks"))
    assert set(load.accepted) <= set(states), "an accepted task was lost"
    assert set(states.values()) == {TaskState.TASK_STATE_COMPLETED.value}
    ended = terminal_events(store)
    assert {task: ended[task] for task in states} == dict.fromkeys(states, 1)
    runs = collections.Counter((tmp_path / "runs").read_text().split())
    twice = {task: count for task, count in runs.items() if count > 1}
    longest = max((started - stopped for stopped, started in outages), default=0.0)
    if longest < OUTAGE_PATIENCE_SECONDS - 10:
        assert not twice, f"agents run more than once: {twice}"
    else:  # a restart that took as long as a turn's patience (a loaded machine): run again once
        assert set(twice.values()) <= {2}, twice
    assert set(runs) == set(states)
    by_task = await gateway.wait_for_pushes_of(states, timeout=120)
    for task_id, pushes in by_task.items():
        assert {push.error for push in pushes} == {None}
        assert {push.json["task"]["status"]["state"] for push in pushes} == {"TASK_STATE_COMPLETED"}
        assert len({push.claims["jti"] for push in pushes if push.claims}) == 1, task_id
    assert [process.poll() for process in running] == [None] * len(running)
    readiness.followed(outages)
    pushed_twice = sum(1 for pushes in by_task.values() if len(pushes) > 1)
    downs = ", ".join(f"{started - stopped:.1f}" for stopped, started in outages)
    print(f"\noutages (s): {downs}; agents run twice: {len(twice)}")
    print(
        f"\n{mode}: {len(outages)} restarts in {CHAOS_SECONDS:g} s;"
        f" {len(load.accepted)} turns accepted, {sum(load.refused.values())} refused"
        f" ({dict(load.refused)}); {pushed_twice} pushes delivered twice (same jti)"
    )
