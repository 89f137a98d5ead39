"""The floor under one SendMessage on this machine: what any authenticated, durable request pays,
each part measured on its own in one run, to set beside the server's CPU per request that
bench/send_message.py prints.

    python bench/floor.py [--seconds 5] [--concurrency 16] [--json results.json]

- **A gateway token verified**: looping-core's own check (`check_gateway_token`: the four checks,
  audience, tenant, one Ed25519 signature), its key set cached, each token new: CPU per token.
- **An HTTP exchange**: a bare aiohttp server whose one handler reads a JSON body and answers a
  small JSON one, driven by `wrk` at `--concurrency` (Debian package `wrk`; skipped without it):
  the server process's CPU per request.
- **A turn's statements in SQLite**: those SendMessage runs per request at c=16
  (bench/send_message.py counts 5 INSERTs and 1 UPDATE that returns the row it changed),
  each a row of a few hundred bytes in a WAL database with `synchronous = NORMAL`, 16 turns per
  commit as the store's group commit makes them: CPU per turn.

Their sum is a floor no server of this design goes under on this machine; what a server spends
above it is its own (routing, parsing, the runner, the agent, logging). Numbers only; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp.test_utils import unused_port

from looping_core.a2a import TokenPolicy
from looping_core.a2a.internal import JwksCache, check_gateway_token
from looping_core.testing import FakeGateway

from bench_results import write_results  # bench/ is on the path

ENDPOINT = "http://127.0.0.1:8080/a2a"
TOKENS = 3000
TURNS = 20000
BODY = json.dumps({"text": "x" * 240, "state": 3, "timestamp": "2026-12-02T23:46:21.000Z"})
SERVER = """
import sys
from aiohttp import web

async def rpc(request):
    body = await request.json()
    return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"task": {
        "id": "5b0c3c9e", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}})

app = web.Application()
app.router.add_post("/a2a", rpc)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""
REQUEST = {
    "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "one two three"}]},
        "configuration": {"returnImmediately": True},
    },
}  # fmt: skip
WRK_SCRIPT = f"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{json.dumps(REQUEST)}'
"""


async def token_seconds() -> float:
    """CPU seconds per gateway token verified, the key set cached (fetched once, first)."""
    async with FakeGateway() as gateway, aiohttp.ClientSession() as session:
        tokens = [gateway.token(tenant="words", aud=ENDPOINT, lifetime=900) for _ in range(TOKENS)]
        policy = TokenPolicy(endpoint=ENDPOINT, gateway_origins=frozenset({gateway.origin}))
        jwks = JwksCache(session)
        await check_gateway_token(tokens[0], tenant="words", policy=policy, jwks=jwks)
        began = time.process_time()
        for token in tokens[1:]:
            await check_gateway_token(token, tenant="words", policy=policy, jwks=jwks)
        return (time.process_time() - began) / (len(tokens) - 1)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def until_listening(port: int) -> None:
    for _ in range(400):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
            return
        time.sleep(0.025)
    raise SystemExit(f"the bare aiohttp server never listened on port {port}")


def http_seconds(seconds: int, concurrency: int) -> float | None:
    """The bare aiohttp server's CPU seconds per request under wrk; `None` without wrk."""
    wrk = shutil.which("wrk")
    if wrk is None:
        print("wrk is not installed: the HTTP exchange is skipped", flush=True)
        return None
    port = unused_port()
    with tempfile.TemporaryDirectory(prefix="looping-bench-floor-") as name:
        script = Path(name) / "post.lua"
        script.write_text(WRK_SCRIPT)
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
        try:
            url = f"http://127.0.0.1:{port}/a2a"
            until_listening(port)
            before = cpu_seconds(server.pid)
            run = subprocess.run(
                [wrk, "-t1", f"-c{concurrency}", f"-d{seconds}s", "-s", str(script), url],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            spent = cpu_seconds(server.pid) - before
        finally:
            server.terminate()
            server.wait(timeout=10)
    requests = int(run.stdout.split(" requests in ", 1)[0].split()[-1])
    return spent / requests


def sqlite_seconds() -> float:
    """CPU seconds per turn's statements: 5 INSERTs and 1 UPDATE returning the row it changed,
    16 turns per commit."""
    with tempfile.TemporaryDirectory(prefix="looping-bench-floor-") as name:
        connection = sqlite3.connect(Path(name) / "floor.db", isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute(
            "CREATE TABLE tasks (id TEXT PRIMARY KEY, owner TEXT, state INT, body TEXT)"
        )
        connection.execute("CREATE INDEX tasks_owner ON tasks (owner, state)")
        connection.execute("CREATE TABLE messages (task_id TEXT, seq INT, body TEXT)")
        connection.execute("CREATE UNIQUE INDEX messages_seq ON messages (task_id, seq)")
        connection.execute("CREATE TABLE events (task_id TEXT, seq INT, body TEXT)")
        connection.execute("CREATE UNIQUE INDEX events_seq ON events (task_id, seq)")
        began = time.process_time()
        for turn in range(TURNS):
            if turn % 16 == 0:
                connection.execute("BEGIN")
            task = f"{turn:032x}"
            connection.execute(
                "INSERT INTO tasks VALUES (?, 'alice', 1, ?)", (task, BODY)
            )  # fmt: skip
            connection.execute("INSERT INTO messages VALUES (?, 1, ?)", (task, BODY))
            connection.execute("INSERT INTO events VALUES (?, 1, ?)", (task, BODY))
            connection.execute("INSERT INTO events VALUES (?, 2, ?)", (task, BODY))
            connection.execute("INSERT INTO events VALUES (?, 3, ?)", (task, BODY))
            connection.execute(
                "UPDATE tasks SET state = 3, body = ? WHERE id = ? RETURNING state, body",
                (BODY, task),
            ).fetchone()
            if turn % 16 == 15:
                connection.execute("COMMIT")
        spent = time.process_time() - began
        connection.close()
    return spent / TURNS


async def measure(seconds: int, concurrency: int) -> dict[str, float]:
    """Each part's CPU seconds per request, and their sum (`floor`), printed as measured."""
    parts = {"token": await token_seconds()}
    print(f"gateway token verified   {parts['token'] * 1000:6.3f} ms CPU", flush=True)
    http = http_seconds(seconds, concurrency)
    if http is not None:
        parts["http"] = http
        print(f"HTTP exchange (c={concurrency})   {http * 1000:6.3f} ms CPU", flush=True)
    parts["sqlite"] = sqlite_seconds()
    print(f"a turn's SQLite statements {parts['sqlite'] * 1000:6.3f} ms CPU", flush=True)
    parts["floor"] = sum(parts.values())
    print(f"floor                    {parts['floor'] * 1000:6.3f} ms CPU per request", flush=True)
    return parts


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=5, help="seconds of wrk load")
    parser.add_argument("--concurrency", type=int, default=16, help="wrk's connections")
    parser.add_argument(
        "--json", type=Path, help="also write the results here (bench/report.py renders them)"
    )
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; the parts of one SendMessage, each on its own", flush=True)
    parts = await measure(args.seconds, args.concurrency)
    if args.json:
        milliseconds = {name: seconds * 1000 for name, seconds in parts.items()}
        write_results(
            args.json, "floor", {"cpu_ms": {"1": milliseconds}}, concurrency=args.concurrency
        )


if __name__ == "__main__":
    asyncio.run(main())
