"""Streaming benchmark: events/s and the delay from an agent's event to its subscribers.

    python bench/streams.py [--subscribers 100] [--events 200] [--interval-ms 10]
                            [--workers 1,2] [--rounds 1] [--json results.json]

Starts `looping serve` (SQLite in a temporary folder) with an agent that, once its subscribers
are connected, reports `--events` progress events `--interval-ms` apart, each carrying the time
it was reported. Two shapes, per `--workers` count:

- fan-out: one task, `--subscribers` SubscribeToTask streams on it;
- many tasks: `--subscribers` tasks at once, one stream each.

With two workers, a stream is served by whichever worker the kernel gives its connection: about
half of them read events another process wrote (found by polling `[streaming] poll_seconds`).
It prints the events delivered per second over all streams, and the delay from the agent's
`progress(...)` call to the subscriber parsing the event (p50, p99, max), measured with the
machine's wall clock in both processes. The subscribers run in this process, so they share the
CPUs with the server. Numbers only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from aiohttp.test_utils import unused_port

from looping_core.testing import FakeGateway, ed25519_private_jwk

from bench_results import write_results  # bench/ is on the path when run as bench/streams.py
from send_message import cpu_seconds

HERE = Path(__file__).parent
TENANT = "emitter"


def write_config(
    folder: Path,
    port: int,
    gateway: FakeGateway,
    workers: int,
    poll_seconds: float,
    *,
    streams: int,
) -> Path:
    """Every stream is the same caller's (a task is only its caller's to watch), so the cap on
    one caller's streams is raised to them all: at the default (16) the rest are refused."""
    config = folder / "looping.toml"
    config.write_text(f"""
[server]
host = "127.0.0.1"
port = {port}
workers = {workers}
access_log = false
max_connections = 4096
[security]
signing_key = "env:A2A_SIGNING_KEY"
gateway_origins = ["{gateway.origin}"]
[store]
url = "sqlite:///{folder / "looping.db"}"
[runner]
concurrency = 256
[limits]
caller_turns = 1000000
tenant_turns = 1000000
caller_requests_per_second = 1000000000
tenant_requests_per_second = 1000000000
[streaming]
poll_seconds = {poll_seconds}
max_streams_per_caller = {streams}
[tenants.{TENANT}]
agent = "streams_agent:EmitterAgent"
allow_configless = true
[tenants.{TENANT}.card]
name = "Emitter"
description = "Reports progress on a schedule."
skills = [{{ id = "emit", name = "Emit", description = "Emits.", tags = ["bench"] }}]
""")
    return config


async def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            if process.poll() is not None:
                raise SystemExit(f"the server exited with {process.returncode}")
            try:
                async with session.get(url + "/.well-known/jwks.json"):
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


class Client:
    def __init__(self, session: aiohttp.ClientSession, gateway: FakeGateway, endpoint: str):
        self.session = session
        self.gateway = gateway
        self.endpoint = endpoint

    def headers(self) -> dict[str, str]:
        token = self.gateway.token(tenant=TENANT, aud=self.endpoint)
        return {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}

    async def start_task(self, text: str) -> str:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        params = {
            "tenant": TENANT,
            "message": message,
            "configuration": {"returnImmediately": True},
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        async with self.session.post(self.endpoint, json=body, headers=self.headers()) as answer:
            return str((await answer.json())["result"]["task"]["id"])

    async def subscribe(self, task_id: str, connected: asyncio.Event, delays: list[float]) -> int:
        """Read the task's stream to its end; the delay of every progress event into `delays`."""
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "SubscribeToTask",
            "params": {"tenant": TENANT, "id": task_id},
        }
        events = 0
        async with self.session.post(self.endpoint, json=body, headers=self.headers()) as answer:
            connected.set()
            async for raw in answer.content:
                if not raw.startswith(b"data: "):
                    continue
                result = json.loads(raw[6:])["result"]
                events += 1
                update = result.get("statusUpdate")
                message = update and update["status"].get("message")
                if message and "data" in message["parts"][0]:
                    delays.append(time.time() - message["parts"][0]["data"]["sent"])
        return events


async def one_shape(
    client: Client, *, tasks: int, per_task: int, events: int, interval_ms: int
) -> tuple[float, list[float], int]:
    """Start `tasks` turns, `per_task` streams each; the wall time, the delays, events read."""
    gate = f"{uuid.uuid4().hex}"
    folder = Path(tempfile.gettempdir())
    text = f"emit:{events}:{interval_ms}:{folder / gate}"
    task_ids = await asyncio.gather(*(client.start_task(text) for _ in range(tasks)))
    delays: list[float] = []
    connected = [asyncio.Event() for _ in range(tasks * per_task)]
    streams = [
        asyncio.create_task(client.subscribe(task_id, connected[i * per_task + j], delays))
        for i, task_id in enumerate(task_ids)
        for j in range(per_task)
    ]
    await asyncio.gather(*(event.wait() for event in connected))
    await asyncio.sleep(0.2)  # every stream has had its snapshot
    started = time.perf_counter()
    (folder / gate).touch()  # the agents start reporting
    counts = await asyncio.gather(*streams)
    elapsed = time.perf_counter() - started
    (folder / gate).unlink(missing_ok=True)
    if refused := sum(1 for count in counts if count == 0):
        print(f"  REFUSED: {refused} of {len(counts)} streams read nothing", flush=True)
    return elapsed, delays, sum(counts)


def measured(elapsed: float, delays: list[float], count: int, cpu: float) -> dict[str, float]:
    ms = sorted(d * 1000 for d in delays)
    return {
        "events_per_second": count / elapsed,
        "p50_ms": statistics.median(ms),
        "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        "max_ms": ms[-1],
        "cpu_share": cpu / elapsed,
    }


def line(label: str, result: dict[str, float]) -> str:
    return (
        f"{label:<32} {result['events_per_second']:7.0f} events/s"
        f"   delay p50 {result['p50_ms']:6.1f} ms   p99 {result['p99_ms']:6.1f} ms"
        f"   max {result['max_ms']:6.1f} ms   server CPU {result['cpu_share']:4.0%}"
    )


Runs = dict[str, dict[str, list[dict[str, float]]]]
"""Per worker count, per shape: each round's measurements."""


async def bench(
    options: argparse.Namespace, workers: int, gateway: FakeGateway, runs: Runs
) -> None:
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        port = unused_port()
        config = write_config(
            folder, port, gateway, workers, options.poll_seconds, streams=options.subscribers
        )
        environment = dict(
            os.environ,
            A2A_SIGNING_KEY=json.dumps(ed25519_private_jwk("bench")),
            PYTHONPATH=str(HERE),
        )
        server = subprocess.Popen(
            [str(Path(sys.executable).with_name("looping")), "serve", "--config", str(config)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            await wait_ready(base, server)
            connector = aiohttp.TCPConnector(limit=0)
            timeout = aiohttp.ClientTimeout(total=None)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                client = Client(session, gateway, base + "/a2a")
                label = f"{workers} worker{'s' if workers > 1 else ''}"
                n = options.subscribers
                for _ in range(options.rounds):
                    for tasks, per_task in ((1, n), (n, 1)):
                        cpu = cpu_seconds(server.pid)
                        elapsed, delays, count = await one_shape(
                            client, tasks=tasks, per_task=per_task, events=options.events,
                            interval_ms=options.interval_ms,
                        )  # fmt: skip
                        cpu = cpu_seconds(server.pid) - cpu
                        shape = f"{tasks} task{'s' if tasks > 1 else ''} x {per_task} stream"
                        shape += "s" if per_task > 1 else ""
                        result = measured(elapsed, delays, count, cpu)
                        runs.setdefault(label, {}).setdefault(shape, []).append(result)
                        print(line(f"{label}, {shape}", result), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)


async def run(options: argparse.Namespace) -> None:
    runs: Runs = {}
    async with FakeGateway() as gateway:
        for workers in options.workers:
            await bench(options, workers, gateway, runs)
    medians = {
        label: {
            shape: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
            for shape, rounds in shapes.items()
        }
        for label, shapes in runs.items()
    }
    if options.rounds > 1:
        print(f"\nmedians of {options.rounds} rounds")
        for label, shapes in medians.items():
            for shape, result in shapes.items():
                print(line(f"{label}, {shape}", result))
    if options.json:
        write_results(options.json, "streams", medians, subscribers=options.subscribers,
                      events=options.events, interval_ms=options.interval_ms,
                      rounds=options.rounds)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--events", type=int, default=200, help="progress events per task")
    parser.add_argument("--interval-ms", type=int, default=10)
    parser.add_argument(
        "--workers", type=lambda text: [int(n) for n in text.split(",")], default=[1, 2]
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--poll-seconds", type=float, default=0.02, help="[streaming] poll_seconds (SQLite)"
    )
    parser.add_argument(
        "--json", type=Path, help="also write the medians here (bench/report.py renders them)"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
