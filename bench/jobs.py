"""Job engine benchmark (PostgreSQL): completed turns/s by worker processes, and how long a
killed worker's turns take to run again.

    python bench/jobs.py [--turns 2000] [--workers 1,2,4] [--concurrency 32] [--rounds 1]
                         [--connections N] [--json results.json]

Starts a throwaway PostgreSQL server on this machine, one `looping serve` that only accepts
turns (`[runner] serve_runs_jobs = false`), and `looping worker` processes that run them. For
each worker count it sends `--turns` SendMessage calls (the example WordCountAgent, with a push
config: one job per turn, which delivers its push), `--concurrency` at a time from this process,
and reports:

- accepted turns/s: the calls answered, over the time they took;
- completed turns/s: the turns completed, from the first call to the last turn's end, read from
  the store;
- pushes delivered/s the same way;
- commits per turn: every transaction committed on the database during the run (the edge's,
  the workers', procrastinate's fetches and heartbeats), per turn. The benchmark itself reads
  the database only before and after: it waits for the turns' pushes at its fake gateway;
- a backlog drained: the workers are stopped, `--turns` more turns are accepted, the workers are
  started again, and the turns they complete per second (from the first end to the last, read
  from the tasks' status times): the shape of procrastinate's own measurement below, in which
  no edge competes for the CPUs meanwhile;
- what PostgreSQL spent per completed turn while the turns ran live: its CPU (every backend's
  and the postmaster's, from /proc), the statements run (pg_stat_statements, preloaded on the
  throwaway server), and which share of them, and of their execution time, was procrastinate's
  (statements naming its tables or functions);
- procrastinate's own ceiling, measured in the same run on the same server once the turns are
  done: no-op jobs/s of one worker process (bench/noop_jobs.py) draining a batch deferred
  beforehand, and completed turns/s (live, and draining) as a share of it.

Then the recovery: two workers, 20 turns of an agent that sleeps 60 s, one worker SIGKILLed once
its turns run; it reports the seconds from the kill until the other worker has taken every one
of them up (`heartbeat_seconds = 1`, `stalled_after_seconds = 3`, `sweep_seconds = 1`).

Everything, PostgreSQL included, shares this machine's CPUs. Numbers only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import psycopg
from aiohttp.test_utils import unused_port

from looping_core.a2a import TaskState
from looping_core.testing import FakeGateway, ed25519_private_jwk

from bench_results import write_results  # bench/ is on the path
from throwaway_postgres import postgres_cost, reset_statements, throwaway_postgres

HERE = Path(__file__).parent
ROOT = HERE.parent
LOOPING = str(Path(sys.executable).with_name("looping"))
ENGINE = """
[limits]
# No turn limits (a backlog of thousands is the point); the fair order's count still runs.
caller_turns = 0
tenant_turns = 0
caller_requests_per_second = 1000000000
tenant_requests_per_second = 1000000000
[runner]
concurrency = {concurrency}
on_restart = "resume"
serve_runs_jobs = false
heartbeat_seconds = 1
stalled_after_seconds = 3
sweep_seconds = 1
"""
SLEEPER = """
[tenants.sleeper]
agent = "jobs_agent:SleepAgent"
allow_configless = true
[tenants.sleeper.card]
name = "Sleeper"
description = "Sleeps."
skills = [{ id = "s", name = "Sleep", description = "Sleeps.", tags = ["sleep"] }]
"""


def write_config(
    folder: Path,
    port: int,
    gateway: FakeGateway,
    store: str,
    slots: int,
    *,
    connections: int | None = None,
) -> Path:
    config = folder / "looping.toml"
    store_section = "[store]\n" + (f"connections = {connections}\n" if connections else "")
    config.write_text(
        (ROOT / "examples" / "looping.toml").read_text()
        .replace("[server]\n", "[server]\naccess_log = false\n")
        .replace("[store]\n", store_section)
        .replace("port = 8080", f"port = {port}")
        .replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
        .replace('"http://127.0.0.1:9000"', json.dumps(gateway.origin))
        .replace("sqlite:///looping.db", store)
        + ENGINE.format(concurrency=slots)
        + SLEEPER
    )  # fmt: skip
    return config


SIGNING_KEY = json.dumps(ed25519_private_jwk("bench"))
"""One agent, one key: the edge and every worker share it (the key push configs' secrets are
sealed with is derived from it, so a worker with a key of its own could open none)."""


def start(command: str, config: Path, log: Path, *arguments: str) -> subprocess.Popen[bytes]:
    environment = dict(os.environ, A2A_SIGNING_KEY=SIGNING_KEY)
    environment["PYTHONPATH"] = str(HERE)
    with log.open("ab") as output:
        return subprocess.Popen(
            [LOOPING, command, "--config", str(config), *arguments],
            env=environment, stdout=output, stderr=output,
        )  # fmt: skip


async def until_logged(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    for _ in range(1200):
        if process.poll() is not None:
            raise SystemExit(f"{log.name} exited:\n{log.read_text()[-2000:]}")
        if log.exists() and text in log.read_text():
            return
        await asyncio.sleep(0.05)
    raise SystemExit(f"{log.name}: {text!r} never appeared")


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(timeout=60)


def count(store: str, query: str) -> int:
    with psycopg.connect(store) as connection:
        return int(connection.execute(query).fetchone()[0])  # type: ignore[index]


async def until_pushed(gateway: FakeGateway, tasks: int) -> None:
    """Wait until pushes of `tasks` distinct tasks arrived, watching the fake gateway in this
    process: polling the database instead would add its own connections and transactions to
    what is measured (and pushes come at least once, so pushes are not tasks)."""
    pushed: set[str] = set()
    seen = 0
    deadline = time.monotonic() + 600
    while len(pushed) < tasks:
        if time.monotonic() > deadline:
            raise SystemExit(f"pushes of {len(pushed)} of {tasks} tasks arrived in 600 s")
        await asyncio.sleep(0.05)
        arrived = gateway.pushes[seen:]
        seen += len(arrived)
        pushed.update(push.task_id for push in arrived if push.task_id and 200 <= push.status < 300)


def completed_since(store: str, since_us: int = 0) -> tuple[int, float, float]:
    """The tasks accepted since `since_us` that completed: how many, and the first and last of
    their ends (status times, Unix seconds)."""
    with psycopg.connect(store) as connection:
        row = connection.execute(
            "SELECT COUNT(*), MIN(status_ts), MAX(status_ts) FROM tasks"
            " WHERE state = %s AND created_ts >= %s",
            (TaskState.TASK_STATE_COMPLETED.value, since_us),
        ).fetchone()
    assert row is not None
    ended, first, last = row
    return int(ended), (first or 0) / 1_000_000, (last or 0) / 1_000_000


async def send_all(
    gateway: FakeGateway, endpoint: str, tenant: str, texts: list[str], concurrency: int
) -> float:
    """Send every turn, `concurrency` at a time; returns the seconds it took."""
    tokens = [gateway.token(tenant=tenant, aud=endpoint, lifetime=900) for _ in texts]
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for token, text in zip(tokens, texts, strict=True):
        queue.put_nowait((token, text))
    push = gateway.push_config()

    async def client(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            token, text = queue.get_nowait()
            message = {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "tenant": tenant, "message": message,
                "configuration": {"returnImmediately": True, "taskPushNotificationConfig": push},
            }}  # fmt: skip
            headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
            async with session.post(endpoint, json=body, headers=headers) as response:
                if response.status != 200 or "result" not in await response.json():
                    raise SystemExit(f"a call failed: {response.status}")

    began = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return time.perf_counter() - began


def drain_rate(store: str, since_us: int) -> float:
    """Turns completed per second among those accepted since `since_us`, from the first end to
    the last (the tasks' status times): the pace of the workers, not of their start."""
    ended, first, last = completed_since(store, since_us)
    return (ended - 1) / (last - first)


async def commits(store: str) -> int:
    """Transactions committed on the store's database so far (PostgreSQL's statistics)."""
    await asyncio.sleep(1.1)  # a backend reports its counts within a second
    query = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    return count(store, query)


def noop_ceiling(store: str, concurrency: int) -> float:
    """procrastinate's no-op jobs/s on the same server, in a database of its own."""
    with psycopg.connect(store, autocommit=True) as connection:
        connection.execute("CREATE DATABASE noop")
    url = store.rsplit("/", 1)[0] + "/noop"
    command = [sys.executable, str(HERE / "noop_jobs.py"), url, "--concurrency", str(concurrency)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return float(output.split("NOOP ", 1)[1].split()[0])


Run = tuple[float, float, float, float, float, float, float, float, float, float]
"""accepted/s, completed/s, pushed/s, commits per turn, backlog drained/s, no-op jobs/s;
PostgreSQL per completed turn (live): CPU ms, statements, procrastinate's share of the
statements, and of their execution time"""


async def throughput(args: argparse.Namespace, workers: int) -> Run:
    with tempfile.TemporaryDirectory(prefix="looping-bench-jobs-") as name, \
            throwaway_postgres() as store:  # fmt: skip
        folder = Path(name)
        async with FakeGateway() as gateway:
            gateway.verify_pushes = False  # the load side must not spend CPU on verifying
            port = unused_port()
            config = write_config(folder, port, gateway, store, 16, connections=args.connections)
            processes = [start("serve", config, folder / "edge.log")]
            try:
                await until_logged(folder / "edge.log", "serving http", processes[0])
                for index in range(workers):
                    log = folder / f"worker-{index}.log"
                    processes.append(start("worker", config, log))
                    await until_logged(log, "worker running jobs", processes[-1])
                endpoint = f"http://127.0.0.1:{port}/a2a"
                committed = await commits(store)
                cpu_before = reset_statements(store)
                began, began_at = time.perf_counter(), time.time()
                texts = ["one two three"] * args.turns
                sent = await send_all(gateway, endpoint, "words", texts, args.concurrency)
                await until_pushed(gateway, args.turns)  # a turn's push follows its end
                pushes_done = time.perf_counter() - began
                cost = postgres_cost(store, cpu_before)
                for calls, ms, query in cost.by_statement[: args.statements]:
                    print(f"    {calls / args.turns:5.2f}/turn"
                          f" {ms * 1000 / args.turns:7.1f} µs/turn  {query[:150]}",
                          flush=True)  # fmt: skip
                per_turn = (await commits(store) - committed) / args.turns
                ended, _, last_end = completed_since(store)
                if ended != args.turns:
                    raise SystemExit(f"{ended} of {args.turns} turns completed")
                turns_done = last_end - began_at

                # The backlog: accepted with no worker running, then drained.
                stop(processes[1:])
                del processes[1:]
                backlog_since = count(store, "SELECT MAX(created_ts) FROM tasks") + 1
                await send_all(gateway, endpoint, "words", texts, args.concurrency)
                for index in range(workers):
                    log = folder / f"worker-{index}.log"
                    processes.append(start("worker", config, log))
                await until_pushed(gateway, 2 * args.turns)
                drained = drain_rate(store, backlog_since)
            finally:
                stop(processes)
            ceiling = noop_ceiling(store, 16)
    return (
        args.turns / sent, args.turns / turns_done, args.turns / pushes_done, per_turn, drained,
        ceiling, cost.cpu_seconds * 1000 / args.turns, cost.statements / args.turns,
        cost.procrastinate_statements / max(cost.statements, 1),
        cost.procrastinate_execution_ms / max(cost.execution_ms, 1e-9),
    )  # fmt: skip


async def recovery() -> float:
    with tempfile.TemporaryDirectory(prefix="looping-bench-jobs-") as name, \
            throwaway_postgres() as store:  # fmt: skip
        folder = Path(name)
        async with FakeGateway() as gateway:
            port = unused_port()
            config = write_config(folder, port, gateway, store, 16)
            processes = [start("serve", config, folder / "edge.log")]
            try:
                await until_logged(folder / "edge.log", "serving http", processes[0])
                logs = [folder / "worker-0.log", folder / "worker-1.log"]
                processes.append(start("worker", config, logs[0]))
                await until_logged(logs[0], "worker running jobs", processes[-1])
                endpoint = f"http://127.0.0.1:{port}/a2a"
                await send_all(gateway, endpoint, "sleeper", ["sleep:60"] * 16, 16)
                running = "SELECT COUNT(*) FROM tasks WHERE state = 2"  # WORKING
                while count(store, running) < 16:
                    await asyncio.sleep(0.05)
                processes.append(start("worker", config, logs[1]))
                await until_logged(logs[1], "worker running jobs", processes[-1])
                processes[1].send_signal(signal.SIGKILL)
                killed = time.perf_counter()
                while len(re.findall("resuming task", logs[1].read_text())) < 16:
                    await asyncio.sleep(0.02)
                return time.perf_counter() - killed
            finally:
                stop(processes)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--workers", default="1,2,4", help="worker process counts")
    parser.add_argument("--concurrency", type=int, default=32, help="calls at once")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--connections", type=int, metavar="N",
        help="[store] connections of every process (default: the store's, 8)",
    )  # fmt: skip
    parser.add_argument(
        "--statements", type=int, default=0, metavar="N",
        help="also print the N costliest statements of each run, per completed turn",
    )  # fmt: skip
    parser.add_argument(
        "--json", type=Path, help="also write the medians here (bench/report.py renders them)"
    )
    args = parser.parse_args()
    counts = [int(item) for item in args.workers.split(",")]
    print(f"{os.cpu_count()} CPUs; {args.turns} turns per run, {args.concurrency} calls at once;"
          " one edge, PostgreSQL on this machine", flush=True)  # fmt: skip
    results: dict[int, list[Run]] = {n: [] for n in counts}
    for _ in range(args.rounds):
        for workers in counts:
            run = await throughput(args, workers)
            results[workers].append(run)
            accepted, completed, pushed, per_turn, drained, ceiling, *postgres = run
            cpu_ms, statements, engine_calls, engine_time = postgres
            print(f"{workers} worker(s): accepted {accepted:6.0f}/s   completed {completed:6.0f}/s"
                  f"   pushed {pushed:6.0f}/s   {per_turn:5.1f} commits/turn   backlog drained"
                  f" {drained:6.0f}/s   procrastinate no-op {ceiling:6.0f} jobs/s (turns:"
                  f" {completed / ceiling:4.2f}x live, {drained / ceiling:4.2f}x draining)\n"
                  f"    PostgreSQL per completed turn: {cpu_ms:5.2f} ms CPU, {statements:5.1f}"
                  f" statements ({engine_calls:.0%} of them procrastinate's, {engine_time:.0%}"
                  " of their execution time)", flush=True)  # fmt: skip
    keys = ("accepted_per_second", "completed_per_second", "pushed_per_second",
            "commits_per_turn", "drained_per_second", "noop_jobs_per_second",
            "postgres_cpu_ms_per_turn", "statements_per_turn", "procrastinate_statement_share",
            "procrastinate_time_share")  # fmt: skip
    medians = {
        workers: {key: statistics.median(run[i] for run in runs) for i, key in enumerate(keys)}
        for workers, runs in results.items()
    }
    if args.rounds > 1:
        for workers, median in medians.items():
            print(
                f"median, {workers} worker(s): accepted {median['accepted_per_second']:.0f}/s,"
                f" completed {median['completed_per_second']:.0f}/s, pushed"
                f" {median['pushed_per_second']:.0f}/s, {median['commits_per_turn']:.1f}"
                f" commits/turn, drained {median['drained_per_second']:.0f}/s,"
                f" no-op {median['noop_jobs_per_second']:.0f} jobs/s"
            )
    seconds = await recovery()
    print(
        f"recovery: a killed worker's 16 turns were taken up by the other {seconds:.2f} s after"
        " the SIGKILL (stalled_after_seconds 3, sweep_seconds 1)"
    )
    if args.json:
        series = {"looping-core": {workers: median for workers, median in medians.items()}}
        write_results(args.json, "jobs", series, turns=args.turns, concurrency=args.concurrency,
                      rounds=args.rounds, recovery_seconds=round(seconds, 2))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
