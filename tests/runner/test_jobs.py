"""The job engine on PostgreSQL: edges that accept turns, `looping worker` processes that run
them, as separate processes on one store; every turn ends once and every push is delivered
once, a dead worker's turns are picked up by another without a hand, a duplicate reaching
another edge makes no second job, and a cancel on one edge stops the turn on a worker elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
from pathlib import Path

import psycopg
import pytest

from looping_core.a2a import TaskState
from looping_core.testing import FakeGateway, ed25519_private_jwk

from support.engine import Processes, engine_config, rows
from support.ports import unused_port, unused_ports
from support.served import log_of, serve, start_worker, wait_for

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

KEY = ed25519_private_jwk("agent-key-1")


async def test_an_edge_and_two_workers_run_every_turn_once_and_push_it_once(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    port = unused_port()
    edge = engine_config(tmp_path, "edge", port, gateway, postgres_url, runs=False)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    released = tmp_path / "released"
    released.touch()
    processes.add(await serve(edge, port, KEY))
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    for log in logs:
        processes.add(await start_worker(edge, KEY, log))
    count = 200
    replies = await asyncio.gather(
        *(gateway.send_turn(f"http://127.0.0.1:{port}/a2a", tenant="bob", text=f"file:{released}")
          for _ in range(count))
    )  # fmt: skip
    assert {status for status, _ in replies} == {200}
    task_ids = sorted(body["result"]["task"]["id"] for _, body in replies)
    pushes = await gateway.wait_for_pushes(count, timeout=120)
    await asyncio.sleep(0.5)  # any push sent twice would arrive by now
    assert len(gateway.pushes) == count
    assert [push.error for push in pushes] == [None] * count
    assert sorted(push.json["task"]["id"] for push in pushes) == task_ids
    assert len({push.claims["jti"] for push in pushes if push.claims}) == count
    completed = TaskState.TASK_STATE_COMPLETED.value
    assert rows(postgres_url, "SELECT DISTINCT state FROM tasks") == [(completed,)]
    assert rows(postgres_url, "SELECT DISTINCT state FROM push_outbox") == [("delivered",)]
    # Both workers ran turns; the edge ran none.
    ended = [len(re.findall(r"turn of task \S+ ended", log.read_text())) for log in logs]
    assert sum(ended) == count
    assert all(ended), ended
    assert "ended:" not in (tmp_path / "server.log").read_text()


async def started(holds: list[Path], count: int) -> None:
    """Until `count` of the held turns have started."""
    async with asyncio.timeout(30):
        while sum(Path(f"{hold}.started").exists() for hold in holds) < count:
            await asyncio.sleep(0.02)


async def test_a_killed_workers_turns_are_resumed_by_another_without_a_hand(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    """SIGKILL one of two workers in the middle of 20 turns: once its heartbeat is overdue
    (stalled_after_seconds 2) and a sweep has run (every second), the other resumes them
    (on_restart = resume); each ends once, with one push."""
    port = unused_port()
    edge = engine_config(tmp_path, "edge", port, gateway, postgres_url, runs=False)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    processes.add(await serve(edge, port, KEY))
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    first = processes.add(await start_worker(edge, KEY, logs[0]))
    holds = [tmp_path / f"hold-{index}" for index in range(20)]
    replies = await asyncio.gather(
        *(gateway.send_turn(f"http://127.0.0.1:{port}/a2a", tenant="bob", text=f"file:{hold}")
          for hold in holds)
    )  # fmt: skip
    assert {status for status, _ in replies} == {200}
    await started(holds, 16)  # the first worker runs 16 at a time
    processes.add(await start_worker(edge, KEY, logs[1]))
    await started(holds, 20)  # the second one the other 4
    os.kill(first.pid, signal.SIGKILL)
    killed_at = asyncio.get_running_loop().time()
    async with asyncio.timeout(30):  # every one of its turns is taken up again
        while logs[1].read_text().count("was running on a worker that stopped") < 16:
            await asyncio.sleep(0.05)
    taken_after = asyncio.get_running_loop().time() - killed_at
    await started(holds, 20)
    for hold in holds:
        hold.touch()
    pushes = await gateway.wait_for_pushes(20, timeout=60)
    await asyncio.sleep(0.5)
    assert len(gateway.pushes) == 20
    assert {push.json["task"]["status"]["state"] for push in pushes} == {"TASK_STATE_COMPLETED"}
    assert len({push.json["task"]["id"] for push in pushes}) == 20
    assert logs[1].read_text().count("resuming task") == 16
    print(f"\nthe killed worker's 16 turns were taken up {taken_after:.2f} s after the kill")


async def test_pushes_wait_out_a_receiver_that_is_down_and_are_delivered_once(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    port = unused_port()
    config = engine_config(tmp_path, "one", port, gateway, postgres_url, runs=True)
    text = config.read_text().replace("backoff_seconds = 0.05", "backoff_seconds = 0.2")
    config.write_text(text.replace("backoff_max_seconds = 0.2", "backoff_max_seconds = 0.4"))
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    released = tmp_path / "released"
    released.touch()
    gateway.push_failures = 4  # down for the first four attempts
    processes.add(await serve(config, port, KEY))
    status, body = await gateway.send_turn(
        f"http://127.0.0.1:{port}/a2a", tenant="bob", text=f"file:{released}"
    )
    assert status == 200
    [push] = await gateway.wait_for_pushes(1, timeout=30)
    assert [p.status for p in gateway.pushes] == [503, 503, 503, 503, 200]
    assert len({p.claims["jti"] for p in gateway.pushes if p.claims}) == 1  # one push, retried
    async with asyncio.timeout(10):  # the attempt is recorded just after the receiver answered
        while (outbox := rows(postgres_url, "SELECT state, attempts FROM push_outbox")) != [
            ("delivered", 5)
        ]:
            assert outbox == [("pending", 4)]
            await asyncio.sleep(0.02)
    assert push.json["task"]["id"] == body["result"]["task"]["id"]


TURNS_AND_PUSHES = (
    "SELECT task_name, status FROM procrastinate_jobs"
    " WHERE task_name IN ('looping.run_turn', 'looping.deliver_push')"
)  # not the periodic sweep's own jobs


async def stop_mid_delivery(
    worker: subprocess.Popen[bytes], store: str, task_name: str
) -> tuple[object, object]:
    """SIGTERM `worker` while a delivery is under way (the receiver holds it), then check that
    its job (`task_name`) was handed back to run again at once; the push's jti and attempts."""
    await asyncio.sleep(0.5)  # the delivery is under way (the receiver holds it)
    worker.send_signal(signal.SIGTERM)
    await asyncio.to_thread(worker.wait, 30)
    assert rows(store, TURNS_AND_PUSHES) == [(task_name, "todo")]
    [(jti, attempts)] = rows(store, "SELECT jti, attempts FROM push_outbox")
    return jti, attempts


async def test_a_push_cut_off_by_its_workers_stop_is_delivered_by_the_next_worker(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    """A worker stopped (SIGTERM) while it delivers a turn's push to a slow receiver waits its
    grace (2 s), then its job is cut off: the job is handed back (not aborted for good), and the
    next worker delivers the same push (the same jti)."""
    port = unused_port()
    edge = engine_config(tmp_path, "edge", port, gateway, postgres_url, runs=False)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    processes.add(await serve(edge, port, KEY))
    first = processes.add(await start_worker(edge, KEY, tmp_path / "worker-a.log"))
    released = tmp_path / "released"
    released.touch()  # the turn completes at once; its push is what is slow
    gateway.push_delay = 30.0
    status, body = await gateway.send_turn(
        f"http://127.0.0.1:{port}/a2a", tenant="bob", text=f"file:{released}"
    )
    assert status == 200
    await rows_become(postgres_url, "SELECT id FROM push_outbox WHERE state = 'pending'", 1)
    jti, attempts = await stop_mid_delivery(first, postgres_url, "looping.run_turn")
    assert attempts == 0  # the push still pending, with no attempt recorded
    gateway.push_delay = 0.0
    processes.add(await start_worker(edge, KEY, tmp_path / "worker-b.log"))
    [push] = await gateway.wait_for_pushes(1, timeout=30)
    assert push.claims is not None
    assert push.claims["jti"] == jti
    assert push.json["task"]["id"] == body["result"]["task"]["id"]
    await rows_become(postgres_url, "SELECT id FROM push_outbox WHERE state = 'delivered'", 1)


async def test_a_push_job_cut_off_by_its_workers_stop_runs_again_on_the_next_worker(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    """The same for a push to try again, which has a job of its own: refused once (503), then
    slow when its job tries again as the worker stops; the next worker delivers it."""
    port = unused_port()
    edge = engine_config(tmp_path, "edge", port, gateway, postgres_url, runs=False)
    text = edge.read_text().replace("backoff_seconds = 0.05", "backoff_seconds = 1.5")
    edge.write_text(text.replace("backoff_max_seconds = 0.2", "backoff_max_seconds = 1.5"))
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    processes.add(await serve(edge, port, KEY))
    first = processes.add(await start_worker(edge, KEY, tmp_path / "worker-a.log"))
    released = tmp_path / "released"
    released.touch()
    gateway.push_failures = 1
    status, _ = await gateway.send_turn(
        f"http://127.0.0.1:{port}/a2a", tenant="bob", text=f"file:{released}"
    )
    assert status == 200
    await rows_become(postgres_url, "SELECT id FROM push_outbox WHERE attempts = 1", 1)
    gateway.push_delay = 30.0  # its next try, a push job due within 1.5 s, is held
    doing = TURNS_AND_PUSHES + " AND status = 'doing'"
    await rows_become(postgres_url, doing, 1)
    jti, attempts = await stop_mid_delivery(first, postgres_url, "looping.deliver_push")
    assert attempts == 1
    gateway.push_delay = 0.0
    processes.add(await start_worker(edge, KEY, tmp_path / "worker-b.log"))
    await rows_become(postgres_url, "SELECT id FROM push_outbox WHERE state = 'delivered'", 1)
    delivered = [push for push in gateway.pushes if push.status == 200]
    assert [push.claims["jti"] for push in delivered if push.claims] == [jti]


NOTE_JOBS = """
CREATE TABLE deferred_jobs (task_name TEXT, args JSONB);
CREATE FUNCTION note_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO deferred_jobs VALUES (NEW.task_name, NEW.args); RETURN NEW; END $$;
CREATE TRIGGER note_job AFTER INSERT ON procrastinate_jobs FOR EACH ROW EXECUTE FUNCTION note_job();
"""


async def rows_become(store: str, query: str, count: int) -> None:
    """Until `query` has `count` rows: a job's end comes a moment after its push arrives."""
    for _ in range(500):
        if len(rows(store, query)) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never {count} rows: {rows(store, query)}")


COMPLETED = TaskState.TASK_STATE_COMPLETED.value
NOTE_ENDS = f"""
CREATE TABLE ended_jobs (task_name TEXT, tx BIGINT);
CREATE FUNCTION note_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO ended_jobs VALUES (OLD.task_name, txid_current()); RETURN OLD; END $$;
CREATE TRIGGER note_end AFTER DELETE ON procrastinate_jobs FOR EACH ROW EXECUTE FUNCTION note_end();
CREATE TABLE recorded_attempts (status INT, tx BIGINT);
CREATE FUNCTION note_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO recorded_attempts VALUES (NEW.status, txid_current()); RETURN NEW; END $$;
CREATE TRIGGER note_attempt AFTER INSERT ON push_attempts
FOR EACH ROW EXECUTE FUNCTION note_attempt();
CREATE TABLE task_ends (task_id TEXT, tx BIGINT);
CREATE FUNCTION note_task_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO task_ends VALUES (NEW.id, txid_current()); RETURN NEW; END $$;
CREATE TRIGGER note_task_end AFTER UPDATE OF state ON tasks
FOR EACH ROW WHEN (NEW.state = {COMPLETED}) EXECUTE FUNCTION note_task_end();
"""


async def test_a_turn_is_one_job_and_only_a_push_to_try_again_gets_one(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    """The turn's job delivers the push its end queued; a receiver that is down has the push
    tried again by a push job of its own (the same row, the same jti). Each job is finished in
    the transaction of its last write, not in one of its own: the record of its last attempt,
    or the turn's end when it queues no push."""
    port = unused_port()
    config = engine_config(tmp_path, "one", port, gateway, postgres_url, runs=True)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    released = tmp_path / "released"
    released.touch()
    processes.add(await serve(config, port, KEY))
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(NOTE_JOBS)  # type: ignore[arg-type]
        connection.execute(NOTE_ENDS)  # type: ignore[arg-type]
    endpoint = f"http://127.0.0.1:{port}/a2a"
    jobs = (
        "SELECT task_name FROM deferred_jobs"
        " WHERE task_name IN ('looping.run_turn', 'looping.deliver_push') ORDER BY 1"
    )
    ended_with = (  # each turn or push job's end, beside the attempt its transaction recorded
        "SELECT e.task_name, a.status FROM ended_jobs e LEFT JOIN recorded_attempts a"
        " ON a.tx = e.tx WHERE e.task_name IN ('looping.run_turn', 'looping.deliver_push')"
        " ORDER BY 1, 2"
    )

    _, first = await gateway.send_turn(endpoint, tenant="bob", text=f"file:{released}")
    await gateway.wait_for_pushes_of([first["result"]["task"]["id"]], timeout=30)
    assert rows(postgres_url, jobs) == [("looping.run_turn",)]
    await rows_become(postgres_url, ended_with, 1)
    assert rows(postgres_url, ended_with) == [("looping.run_turn", 200)]

    gateway.push_failures = 1  # down for the next attempt
    _, second = await gateway.send_turn(endpoint, tenant="bob", text=f"file:{released}")
    second_id = second["result"]["task"]["id"]
    [delivered] = (await gateway.wait_for_pushes_of([second_id], timeout=30))[second_id]
    assert [p.status for p in gateway.pushes[1:]] == [503, 200]
    assert {p.claims["jti"] for p in gateway.pushes[1:] if p.claims} == {delivered.claims["jti"]}
    assert rows(postgres_url, jobs) == [
        ("looping.deliver_push",),
        ("looping.run_turn",),
        ("looping.run_turn",),
    ]
    # The second turn's job ended as it recorded the refused attempt (deferring the push job
    # in the same transaction); the push job ended as it recorded the delivery.
    await rows_become(postgres_url, ended_with, 3)
    assert rows(postgres_url, ended_with) == [
        ("looping.deliver_push", 200),
        ("looping.run_turn", 200),
        ("looping.run_turn", 503),
    ]

    # A turn without a push config: its job ends with the turn's end.
    _, third = await gateway.send_turn(endpoint, tenant="bob", text=f"file:{released}", inbox=None)
    ended_by_end = "SELECT e.task_name, t.task_id FROM ended_jobs e JOIN task_ends t ON t.tx = e.tx"
    await rows_become(postgres_url, ended_by_end, 1)
    assert rows(postgres_url, ended_by_end) == [("looping.run_turn", third["result"]["task"]["id"])]
    assert (
        len(rows(postgres_url, "SELECT * FROM ended_jobs WHERE task_name = 'looping.run_turn'"))
        == 3
    )
    assert rows(
        postgres_url,
        "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
        " AND task_name IN ('looping.run_turn', 'looping.deliver_push')",
    ) == [(0,)]
    assert "Job was not found" not in log_of(config).read_text()  # no finish after the end


async def test_a_duplicate_at_another_edge_makes_no_second_job_and_a_cancel_there_stops_the_turn(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    ports = unused_ports(2)
    edges = [
        engine_config(tmp_path, f"edge-{index}", port, gateway, postgres_url, runs=False)
        for index, port in enumerate(ports)
    ]
    for edge, port in zip(edges, ports, strict=True):
        processes.add(await serve(edge, port, KEY))
    gateway.agent_jwks_url = f"http://127.0.0.1:{ports[0]}/.well-known/jwks.json"
    processes.add(await start_worker(edges[0], KEY, tmp_path / "worker.log"))
    hold = tmp_path / "hold"
    first, second = await asyncio.gather(
        *(gateway.send_turn(f"http://127.0.0.1:{port}/a2a", tenant="bob", text=f"file:{hold}",
                            message_id="same-message")
          for port in ports)
    )  # fmt: skip
    task_id = first[1]["result"]["task"]["id"]
    assert second[1]["result"]["task"]["id"] == task_id
    await wait_for(Path(f"{hold}.started"))
    assert rows(postgres_url, "SELECT COUNT(*) FROM tasks") == [(1,)]
    jobs = rows(postgres_url, "SELECT COUNT(*) FROM procrastinate_jobs WHERE task_name ="
                " 'looping.run_turn'")  # fmt: skip
    assert jobs == [(1,)]

    status, body = await gateway.call(
        f"http://127.0.0.1:{ports[1]}/a2a", "CancelTask", {"tenant": "bob", "id": task_id},
        tenant="bob",
    )  # fmt: skip
    assert status == 200
    assert body["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    canceled_at = asyncio.get_running_loop().time()
    await wait_for(Path(f"{hold}.cancelled"))
    stopped_after = asyncio.get_running_loop().time() - canceled_at
    assert stopped_after < 1.0  # told at once, not found by a poll
    [push] = await gateway.wait_for_pushes(1)
    assert push.json["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    hold.touch()
    await asyncio.sleep(0.5)
    assert len(gateway.pushes) == 1  # the stopped turn wrote nothing more
    print(f"\nthe turn stopped {stopped_after * 1000:.0f} ms after the cancel")


async def test_a_turn_that_kills_every_worker_running_it_is_failed_after_three(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    """A poison turn: each worker that runs it dies. The sweep hands it on twice, then fails its
    task (reason WORKER_LOST) rather than letting it take down every worker in turn."""
    port = unused_port()
    edge = engine_config(tmp_path, "edge", port, gateway, postgres_url, runs=False)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    processes.add(await serve(edge, port, KEY))
    status, body = await gateway.send_turn(f"http://127.0.0.1:{port}/a2a", tenant="bob", text="die")
    assert status == 200
    task_id = body["result"]["task"]["id"]
    deaths = 0
    async with asyncio.timeout(60):
        while True:
            worker = processes.add(await start_worker(edge, KEY, tmp_path / f"w{deaths}.log"))
            while worker.poll() is None and not gateway.pushes:
                await asyncio.sleep(0.05)
            if worker.poll() is None:
                break  # it lived: the task was failed instead of run
            deaths += 1
    assert deaths == 3
    [push] = await gateway.wait_for_pushes(1)
    task = push.json["task"]
    assert task["id"] == task_id
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert task["status"]["message"]["metadata"] == {"reason": "WORKER_LOST"}
    assert "stopped, 3 times; failing it" in (tmp_path / "w3.log").read_text()
