"""The store out of reach for a while: a PostgreSQL restart under load, SQLite busy past its
timeout. Callers hear a retriable answer (HTTP 503, `Retry-After`, reason UNAVAILABLE) on both
bindings; the log says so once, with no traceback; the job workers (in `looping serve` and in
`looping worker`) run again within seconds, and every turn accepted ends once the store is back,
none left WORKING without a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import uuid
from pathlib import Path

import aiohttp
import psycopg
import pytest

from looping_core.a2a import TaskState
from looping_core.testing import FakeGateway, ed25519_private_jwk

from support import agents as test_agents
from support.bindings import BINDINGS, Binding, message
from support.engine import Processes, engine_config, rows
from support.pg_server import PostgresServer
from support.ports import unused_port
from support.served import serve, start_worker
from support.serving import serving

# Processes of their own (see tests/conftest.py), and outages timed against a loaded machine:
# run alone, after the parallel run (the README's test command).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

KEY = ed25519_private_jwk("agent-key-1")
OUTAGE_SECONDS = 6
UNSETTLED = (TaskState.TASK_STATE_SUBMITTED.value, TaskState.TASK_STATE_WORKING.value)


async def ready(port: int) -> tuple[int, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz") as response,
    ):
        return response.status, await response.json()


async def until_ready(port: int, seconds: float) -> float:
    """How long until `/readyz` says 200 (fails after `seconds`)."""
    began = asyncio.get_running_loop().time()
    async with asyncio.timeout(seconds):
        while (await ready(port))[0] != 200:
            await asyncio.sleep(0.1)
    return asyncio.get_running_loop().time() - began


class Traffic:
    """Turns sent to one edge as a gateway sends them: which were accepted, which refused."""

    def __init__(self, gateway: FakeGateway, endpoint: str) -> None:
        self.gateway = gateway
        self.endpoint = endpoint
        self.accepted: list[str] = []
        self.refused: list[tuple[int, str]] = []
        self._stop = asyncio.Event()

    async def send(self, text: str) -> None:
        status, body = await self.gateway.send_turn(self.endpoint, tenant="bob", text=text)
        if status == 200:
            self.accepted.append(body["result"]["task"]["id"])
        else:
            self.refused.append((status, body["error"]["data"][0]["reason"]))

    async def load(self, text: str) -> None:
        """A turn every 50 ms until `stop`."""
        while not self._stop.is_set():
            await self.send(text)
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()

    async def get_task_answer(self, task_id: str) -> tuple[int, str | None, str]:
        """GetTask's HTTP status, `Retry-After` and error reason."""
        token = self.gateway.token(tenant="bob", aud=self.endpoint)
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                    "params": {"tenant": "bob", "id": task_id}}  # fmt: skip
        headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.endpoint, json=envelope, headers=headers) as response,
        ):
            reason = (await response.json())["error"]["data"][0]["reason"]
            return response.status, response.headers.get("Retry-After"), reason


async def after_the_outage(traffic: Traffic, released: Path, logs: list[Path]) -> None:
    """New turns run (the job workers came back); each process said the outage once, and its
    end, with no traceback."""
    before = len(traffic.gateway.pushes)
    await traffic.send(f"file:{released}")
    await traffic.gateway.wait_for_pushes(before + 1, timeout=30)
    for log in logs:
        text = log.read_text()
        assert "Traceback" not in text
        assert len(re.findall(r"WARNING looping_core.store: the store is unavailable", text)) == 1
        assert text.count("the store is available again") == 1


async def started(holds: list[Path]) -> None:
    async with asyncio.timeout(30):
        while not all(Path(f"{hold}.started").exists() for hold in holds):
            await asyncio.sleep(0.02)


async def every_turn_pushed(gateway: FakeGateway, task_ids: list[str]) -> None:
    """Each task's push came, verified and COMPLETED. At least once: a delivery whose end the
    outage kept from being recorded is sent again, but as the same push (its jti)."""
    by_task = await gateway.wait_for_pushes_of(task_ids, timeout=60)
    pushes = [push for each in by_task.values() for push in each]
    assert [push.error for push in pushes] == [None] * len(pushes)
    assert {push.json["task"]["status"]["state"] for push in pushes} == {"TASK_STATE_COMPLETED"}
    for task_pushes in by_task.values():
        assert len({push.claims["jti"] for push in task_pushes if push.claims}) == 1


@pytest.mark.parametrize("mode", ["serve", "worker"])
async def test_a_postgresql_restart_under_load_stops_no_job_worker_and_loses_no_turn(
    mode: str,
    tmp_path: Path,
    gateway: FakeGateway,
    own_postgres: PostgresServer,
    processes: Processes,
) -> None:
    """`pg_ctl stop -m fast` while turns are accepted and some are running, started again six
    seconds later. Meanwhile every call is 503 with `Retry-After` and /readyz names what is
    down; afterwards the job workers run again (the processes never exit), every accepted turn
    ends COMPLETED (the held ones resumed: on_restart = resume) and is pushed, and the log says
    the outage once per process, with no traceback."""
    store = own_postgres.create_database()
    port = unused_port()
    config = engine_config(tmp_path, "edge", port, gateway, store, runs=mode == "serve")
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    running = [processes.add(await serve(config, port, KEY))]
    logs = [tmp_path / "server.log"]
    if mode == "worker":
        logs.append(tmp_path / "worker.log")
        running.append(processes.add(await start_worker(config, KEY, logs[1])))
    traffic = Traffic(gateway, f"http://127.0.0.1:{port}/a2a")
    released = tmp_path / "released"
    released.touch()
    holds = [tmp_path / f"hold-{index}" for index in range(4)]
    for hold in holds:
        await traffic.send(f"file:{hold}")
    await started(holds)  # these run when the store goes away
    loader = asyncio.create_task(traffic.load(f"file:{released}"))
    await asyncio.sleep(1)

    # On a thread: pg_ctl waits, and this test's own traffic must not wait with it (a
    # connection PostgreSQL took while shutting down can hold its restart for a minute, and a
    # blocked loop would time out the load's requests as if the agent had not answered).
    await asyncio.to_thread(own_postgres.stop, "fast")
    await asyncio.sleep(1)
    status, body = await ready(port)
    assert status == 503
    assert "store" in body["failing"]  # type: ignore[operator]
    assert await traffic.get_task_answer(traffic.accepted[0]) == (503, "2", "UNAVAILABLE")
    if mode == "serve":
        async with asyncio.timeout(15):  # its job workers stopped with the store: it says so
            while "jobs" not in (await ready(port))[1].get("failing", []):  # type: ignore[operator]
                await asyncio.sleep(0.1)
    await asyncio.sleep(OUTAGE_SECONDS - 2)
    await asyncio.to_thread(own_postgres.start)
    back_after = await until_ready(port, 30)
    await asyncio.sleep(1)
    traffic.stop()
    await loader
    for hold in holds:
        hold.touch()

    assert traffic.refused, "no turn was sent during the outage"
    assert set(traffic.refused) == {(503, "UNAVAILABLE")}
    async with asyncio.timeout(60):  # every accepted turn ends
        while rows(store, f"SELECT COUNT(*) FROM tasks WHERE state IN {UNSETTLED}") != [(0,)]:
            await asyncio.sleep(0.2)
    states = dict(rows(store, "SELECT id, state FROM tasks"))  # type: ignore[arg-type]
    assert sorted(states) == sorted(traffic.accepted)
    assert set(states.values()) == {TaskState.TASK_STATE_COMPLETED.value}
    await every_turn_pushed(gateway, traffic.accepted)
    assert [process.poll() for process in running] == [None] * len(running)
    await after_the_outage(traffic, released, logs)
    print(f"\n{mode}: {len(traffic.accepted)} turns accepted, {len(traffic.refused)} refused;"
          f" ready {back_after:.1f} s after the store started again")  # fmt: skip


@pytest.mark.parametrize("binding", sorted(BINDINGS))
async def test_calls_during_a_store_outage_are_503_with_retry_after(
    binding: str, gateway: FakeGateway, postgres_url: str
) -> None:
    """The store refuses connections: every call is answered 503, reason UNAVAILABLE,
    `Retry-After` set (gRPC: UNAVAILABLE with a RetryInfo), on every binding (never -32603
    and a traceback); and it serves again
    once the store is back."""
    server, _, name = postgres_url.rpartition("/")
    async with serving(gateway, store_url=postgres_url, grpc=True) as agent:
        client: Binding = BINDINGS[binding](agent, gateway)
        configuration = {"taskPushNotificationConfig": gateway.push_config()}
        sent = await client.call(
            "SendMessage", {"message": message("hello"), "configuration": configuration}
        )
        assert sent.ok, sent.body
        task_id = sent.result["task"]["id"]
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")  # type: ignore[arg-type]
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            try:
                for method, params in (
                    ("GetTask", {"id": task_id}),
                    ("SendMessage", {"message": message("again"), "configuration": configuration}),
                    ("ListTasks", {}),
                ):
                    answer = await client.call(method, params)
                    unavailable = 14 if binding == "grpc" else 503  # gRPC's UNAVAILABLE
                    assert (answer.status, answer.reason) == (unavailable, "UNAVAILABLE"), method
                    assert answer.headers["Retry-After"] == "2"
            finally:
                admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")  # type: ignore[arg-type]
        async with asyncio.timeout(10):
            while not (answer := await client.call("GetTask", {"id": task_id})).ok:
                assert answer.reason == "UNAVAILABLE"
                await asyncio.sleep(0.1)


async def test_sqlite_busy_past_its_timeout_is_503_not_an_internal_error(
    gateway: FakeGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another program holds SQLite's write lock past the store's busy timeout (5 s): the call
    is 503 UNAVAILABLE with `Retry-After`, logged as one WARNING without a traceback; released,
    the store serves again."""
    path = tmp_path / "busy.db"
    async with serving(gateway, store_url=f"sqlite:///{path}") as agent:
        client: Binding = BINDINGS["jsonrpc"](agent, gateway)
        assert (await client.call("ListTasks", {})).ok
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            answer = await client.call("ListTasks", {})
        finally:
            with contextlib.suppress(sqlite3.Error):
                holder.execute("ROLLBACK")
            holder.close()
        assert (answer.status, answer.reason) == (503, "UNAVAILABLE")
        assert answer.headers["Retry-After"] == "2"
        assert (await client.call("ListTasks", {})).ok
    warnings = [r for r in caplog.records if r.name == "looping_core.store"]
    assert [r.levelname for r in warnings] == ["WARNING", "WARNING"]
    assert "database is locked" in warnings[0].getMessage()
    assert not any(r.exc_info for r in caplog.records if r.levelname in ("WARNING", "ERROR"))


async def test_a_turn_whose_end_meets_an_outage_writes_it_when_the_store_is_back(
    gateway: FakeGateway, postgres_url: str
) -> None:
    """The agent answers while the store refuses connections: the turn keeps its answer and
    writes its end once the store is back (the job engine's worker stopped meanwhile and its
    job was handed back): COMPLETED, one push, and the agent ran once."""
    server, _, name = postgres_url.rpartition("/")
    engine = "[runner]\nheartbeat_seconds = 0.5\nstalled_after_seconds = 2\nsweep_seconds = 1\n"
    async with serving(gateway, store_url=postgres_url, extra=engine) as agent:
        client: Binding = BINDINGS["jsonrpc"](agent, gateway)
        hold = "outage-" + uuid.uuid4().hex
        configuration = {
            "returnImmediately": True,
            "taskPushNotificationConfig": gateway.push_config(),
        }
        sent = await client.call(
            "SendMessage", {"message": message(hold), "configuration": configuration}, tenant="bob"
        )
        task_id = sent.result["task"]["id"]
        async with asyncio.timeout(10):
            while not test_agents.RUNS[task_id]:
                await asyncio.sleep(0.02)
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")  # type: ignore[arg-type]
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            test_agents.RELEASE.setdefault(hold, asyncio.Event()).set()
            await asyncio.sleep(4)  # the end write is tried meanwhile, and the worker stops
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")  # type: ignore[arg-type]
        [push] = await gateway.wait_for_pushes(1, timeout=30)
        assert push.json["task"]["id"] == task_id
        assert push.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        await asyncio.sleep(3)  # the sweep has handed the stopped worker's job back by now
        assert test_agents.RUNS[task_id] == 1  # its answer was kept: the agent never ran again
        assert len(gateway.pushes) == 1
