"""A lean reference server for bench/send_message.py --lean: the least a durable, authenticated
A2A SendMessage server of looping-core's design does in Python, written straight down.

    python bench/lean_server.py PORT ENDPOINT GATEWAY_ORIGIN DATABASE

It answers only what the benchmark sends (a JSON-RPC SendMessage with `returnImmediately`) and
does, per request, what the floor's parts (bench/floor.py) cannot show on their own but any such
server must: the HTTP exchange with aiohttp (uvloop when installed, as `looping serve`), the
gateway token checked by looping-core's own check (four checks, audience, tenant), the envelope
and the parameters parsed into looping-core's wire models, the task accepted once per caller and
messageId and begun in one transaction of the store's schema (`upgrade`), committed on a thread
of its own in group commits (the event loop never waits on SQLite) before the answer, the answer
encoded from the models, then the turn: its words counted, its end (state, artifact, events)
written the same way, and one log line.

Left out, and each a part of what `looping serve` does besides: the limits and their count of
unsettled turns, the plugin host and the agent seam, the runner's slots and supervision, request
ids, metrics and tracing hooks, the refusal of every other method and of bad input with its own
error, pushes. What `looping serve` spends over this server is the price of those; what this server
spends over the floor is the glue no server of the design avoids. Not a server to run: a
measuring stick.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import sqlite3
import sys
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
import attrs
from aiohttp import web

from looping_core.a2a import (
    Artifact,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    TokenPolicy,
    TokenRejected,
    from_wire,
    to_wire,
)
from looping_core.a2a.internal import JwksCache, SendMessageRequest, check_gateway_token
from looping_core.store._rows import new_id, timestamp  # the store's own ids and times
from looping_core.store.internal import Database, now_us, upgrade

log = logging.getLogger("lean")
COMPACT = json.JSONEncoder(separators=(",", ":"))

ACCEPT = (
    "INSERT INTO tasks (id, tenant, issuer, subject, context_id, state, status_message,"
    " status_ts, created_ts, node, worker, turn_message, event_seq)"
    " SELECT ?, ?, ?, ?, ?, ?, NULL, ?, ?, '', 0, ?, 1 WHERE NOT EXISTS (SELECT 1 FROM messages"
    " WHERE tenant = ? AND issuer = ? AND subject = ? AND message_id = ?)"
)
MESSAGE = (
    "INSERT INTO messages (task_id, tenant, issuer, subject, message_id, body, joined)"
    " VALUES (?, ?, ?, ?, ?, ?, 0)"
)
EVENT = "INSERT INTO task_events (task_id, seq, body, created_ts) VALUES (?, ?, ?, ?)"
END = (
    "UPDATE tasks SET state = ?, status_ts = ?, event_seq = event_seq + 2"
    " WHERE id = ? AND state = ? RETURNING event_seq"
)
ARTIFACT = (
    "INSERT INTO artifacts (task_id, artifact_id, body) VALUES (?, ?, ?)"
    " ON CONFLICT (task_id, artifact_id) DO UPDATE SET body = excluded.body"
)
WORKING = TaskState.TASK_STATE_WORKING.value


def encode(value: Any) -> str:
    return COMPACT.encode(to_wire(value))


class Writer:
    """SQLite on a thread of its own: each job a function of the connection; every job waiting
    when the thread comes round is one transaction (a group commit)."""

    def __init__(self, path: str) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._loop = asyncio.get_running_loop()
        self._path = path
        threading.Thread(target=self._work, name="lean-db", daemon=True).start()

    async def run(self, job: Callable[..., Any], *args: Any) -> Any:
        future = self._loop.create_future()
        self._jobs.put((job, args, future))
        return await future

    def _work(self) -> None:
        connection = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        for pragma in ("journal_mode = wal", "synchronous = normal", "foreign_keys = 1"):
            connection.execute(f"PRAGMA {pragma}")
        while True:
            batch = [self._jobs.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 64:
                    batch.append(self._jobs.get_nowait())
            connection.execute("BEGIN IMMEDIATE")
            try:
                results = [(job(connection, *args), None) for job, args, _ in batch]
                connection.execute("COMMIT")
            except Exception as exc:  # the reference server fails the whole batch
                connection.execute("ROLLBACK")
                results = [(None, exc)] * len(batch)
            self._loop.call_soon_threadsafe(_settle, [job[2] for job in batch], results)


def _settle(futures: list[asyncio.Future[Any]], results: list[tuple[Any, Any]]) -> None:
    for future, (result, exc) in zip(futures, results, strict=True):
        if not future.cancelled():
            future.set_exception(exc) if exc is not None else future.set_result(result)


def accept(db: sqlite3.Connection, owner: tuple[str, str, str], task: Task) -> bool:
    """The new task and its message, and its turn begun (WORKING), once per messageId."""
    message, us = task.history[0], now_us()
    written = db.execute(
        ACCEPT, (task.id, *owner, task.context_id, WORKING, us, us, message.message_id,
                 *owner, message.message_id),
    ).rowcount  # fmt: skip
    if written != 1:
        return False
    db.execute(MESSAGE, (task.id, *owner, message.message_id, encode(message)))
    status = TaskStatus(state=TaskState.TASK_STATE_WORKING, timestamp=timestamp(us))
    event = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)
    db.execute(EVENT, (task.id, 1, encode(StreamResponse(status_update=event)), us))
    return True


def end(db: sqlite3.Connection, task: Task, artifact: Artifact) -> None:
    """The turn's end: COMPLETED, its artifact, and their two events."""
    us = now_us()
    state = TaskState.TASK_STATE_COMPLETED
    (seq,) = db.execute(END, (state.value, us, task.id, WORKING)).fetchone()
    db.execute(ARTIFACT, (task.id, artifact.artifact_id, encode(artifact)))
    update = TaskArtifactUpdateEvent(task_id=task.id, context_id=task.context_id, artifact=artifact)
    status = TaskStatusUpdateEvent(
        task_id=task.id, context_id=task.context_id,
        status=TaskStatus(state=state, timestamp=timestamp(us)),
    )  # fmt: skip
    db.execute(EVENT, (task.id, seq - 1, encode(StreamResponse(artifact_update=update)), us))
    db.execute(EVENT, (task.id, seq, encode(StreamResponse(status_update=status)), us))


async def turn(writer: Writer, task: Task, tenant: str) -> None:
    words = sum(len(part.text.split()) for part in task.history[0].parts if part.text)
    artifact = Artifact(artifact_id="count", parts=(Part(text=str(words)),))
    await writer.run(end, task, artifact)
    log.info("turn ended tenant=%s task=%s state=completed", tenant, task.id)


def make_app(endpoint: str, origin: str, database: str) -> web.Application:
    policy = TokenPolicy(endpoint=endpoint, gateway_origins=frozenset({origin}))
    turns: set[asyncio.Task[None]] = set()

    async def started(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession()
        app["jwks"] = JwksCache(app["session"])
        app["writer"] = Writer(database)

    async def stopped(app: web.Application) -> None:
        await app["session"].close()

    async def rpc(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        if body.get("jsonrpc") != "2.0" or body.get("method") != "SendMessage":
            return web.json_response({"jsonrpc": "2.0", "id": body.get("id"), "error": {
                "code": -32601, "message": "only SendMessage"}})  # fmt: skip
        params = from_wire(body["params"], SendMessageRequest)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        try:
            verified = await check_gateway_token(
                token, tenant=params.tenant, policy=policy, jwks=request.app["jwks"]
            )
        except TokenRejected:
            raise web.HTTPUnauthorized() from None
        caller = verified.identity
        owner = (caller.tenant, caller.issuer, caller.subject)
        task_id, us = new_id(), now_us()
        context_id = params.message.context_id or new_id()
        message = attrs.evolve(params.message, task_id=task_id, context_id=context_id)
        status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=timestamp(us))
        task = Task(id=task_id, context_id=context_id, status=status, history=(message,))
        if not await request.app["writer"].run(accept, owner, task):
            raise web.HTTPConflict()  # a duplicate: the benchmark never sends one
        running = asyncio.create_task(turn(request.app["writer"], task, caller.tenant))
        turns.add(running)
        running.add_done_callback(turns.discard)
        answer = {"jsonrpc": "2.0", "id": body["id"], "result": {"task": to_wire(task)}}
        return web.Response(text=COMPACT.encode(answer), content_type="application/json")

    app = web.Application()
    app.router.add_post("/a2a", rpc)
    app.on_startup.append(started)
    app.on_cleanup.append(stopped)
    return app


def main() -> None:
    port, endpoint, origin, database = sys.argv[1:5]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    store = Database.from_url(f"sqlite:///{database}")
    try:
        store.run_sync(upgrade, store.peewee)
    finally:
        store.close()
    try:
        import uvloop  # noqa: PLC0415 - as `looping serve` with `event_loop = "auto"`

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    app = make_app(endpoint, origin, database)
    web.run_app(app, host="127.0.0.1", port=int(port), access_log=None, print=None, loop=loop)


if __name__ == "__main__":
    main()
