"""The task store: tasks, their history and artifacts, push configs, and the push outbox.

Every method is scoped to the verified caller (tenant, issuer, subject) wherever a caller is
involved: anyone else's task is `TaskNotFound`, never "forbidden". State changes go through
`transition`, one guarded UPDATE that succeeds only from the states it names; terminal states are
written only from non-terminal ones, so the first writer wins and every writer learns from the
write itself whether it did. Pushes are queued in the same transaction as the change they report
(a transactional outbox), so a crash can lose neither.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import peewee

from looping_core.a2a.errors import (
    InvalidParams,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)
from looping_core.a2a.gateway_token import Identity
from looping_core.a2a.grammar import id_problem, printable, undeliverable_reason
from looping_core.a2a.models import (
    TERMINAL_STATES,
    Artifact,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
)
from looping_core.a2a.protojson import from_wire, to_wire
from looping_core.store.db import Database
from looping_core.store.models import (
    PushAttempt,
    PushConfigRow,
    PushOutbox,
    TaskRow,
)

__all__ = [
    "NON_TERMINAL",
    "OutboxItem",
    "TaskStore",
    "TurnStart",
    "adopt_node",
    "adopt_orphans",
    "now_us",
]

NON_TERMINAL = tuple(state for state in TaskState if state not in TERMINAL_STATES)
_NOTIFY = TERMINAL_STATES | {
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}
_RUNNING = (TaskState.TASK_STATE_SUBMITTED.value, TaskState.TASK_STATE_WORKING.value)
DEFAULT_PAGE_SIZE = 50


def now_us() -> int:
    return time.time_ns() // 1000


def _timestamp(us: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(us / 1_000_000, datetime.UTC)


def _dump(value: Any) -> str:
    return json.dumps(to_wire(value), separators=(",", ":"))


@attrs.frozen
class TurnStart:
    """What `start_turn` did: the task, and whether this call created the turn."""

    task: Task
    started: bool


@attrs.frozen
class OutboxItem:
    id: int
    task_id: str
    config_id: str
    jti: str
    url: str
    body: bytes
    attempts: int
    created_ts: int
    token: str
    authentication: tuple[str, str] | None


@attrs.frozen
class _Head:
    """The columns of a task row a snapshot needs."""

    id: str
    context_id: str
    state: int
    status_message: str | None
    status_ts: int


_HEAD = "SELECT id, context_id, state, status_message, status_ts FROM tasks"


class TaskStore:
    """Async task storage; every call runs on the database's own thread.

    The hot path (a turn's writes, snapshots, the outbox) is plain parameterized SQL: building
    peewee queries cost more than running them. The schema itself is the peewee models'.
    """

    def __init__(self, database: Database, *, node: str = "", worker: int = 0) -> None:
        """`node` and `worker` say whose turns these are: the server (`[server] node`) and its
        worker slot. Recovery and push delivery look at this owner's rows only."""
        self._db = database
        self._node = node
        self._worker = worker
        self._sql = database.execute

    # -- turns --------------------------------------------------------------------------------

    async def start_turn(
        self, caller: Identity, message: Message, push: TaskPushNotificationConfig | None
    ) -> TurnStart:
        """Accept a user message exactly once per (caller, messageId): a new task, or a follow-up
        to an interrupted one. A duplicate returns the first task and starts nothing."""
        try:
            return await self._db.run(self._start_turn, caller, message, push)
        except peewee.IntegrityError:
            # Another connection (PostgreSQL, or another server process) committed the same
            # messageId first; this transaction was rolled back, and the retry finds that turn.
            return await self._db.run(self._start_turn, caller, message, push)

    def _start_turn(
        self, caller: Identity, message: Message, push: TaskPushNotificationConfig | None
    ) -> TurnStart:
        scope = (caller.tenant, caller.issuer, caller.subject)
        with self._db.write():
            duplicate = self._sql(
                "SELECT task_id FROM messages"
                " WHERE tenant = ? AND issuer = ? AND subject = ? AND message_id = ?",
                (*scope, message.message_id),
            ).fetchone()
            if duplicate is not None:
                return TurnStart(self._snapshot(duplicate[0], None, include_artifacts=True), False)
            stamp = now_us()
            if message.task_id:
                head = self._owned(caller, message.task_id)
                self._check_follow_up(message, head)
                updated = self._sql(
                    "UPDATE tasks SET state = ?, status_message = NULL, status_ts = ?, node = ?,"
                    " worker = ? WHERE id = ? AND state = ?",
                    (
                        TaskState.TASK_STATE_SUBMITTED.value,
                        stamp,
                        self._node,
                        self._worker,
                        head.id,
                        head.state,
                    ),
                ).rowcount
                if updated != 1:
                    raise UnsupportedOperation("The task changed state; fetch it and try again")
                task_id, context_id = head.id, head.context_id
            else:
                task_id = str(uuid.uuid4())
                context_id = message.context_id or str(uuid.uuid4())
                self._sql(
                    "INSERT INTO tasks (id, tenant, issuer, subject, context_id, state,"
                    " status_message, status_ts, created_ts, node, worker)"
                    " VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)",
                    (
                        task_id,
                        *scope,
                        context_id,
                        TaskState.TASK_STATE_SUBMITTED.value,
                        stamp,
                        stamp,
                        self._node,
                        self._worker,
                    ),
                )
            stored = attrs.evolve(message, task_id=task_id, context_id=context_id)
            self._sql(
                "INSERT INTO messages (task_id, tenant, issuer, subject, message_id, body)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (task_id, *scope, message.message_id, _dump(stored)),
            )
            if push is not None:
                # An inline config without an id takes the task's id (as the official SDK does),
                # so the config a gateway re-sends with every turn replaces itself.
                self._put_push_config(task_id, attrs.evolve(push, id=push.id or task_id))
            if message.task_id:
                return TurnStart(self._snapshot(task_id, None, include_artifacts=True), True)
            status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=_timestamp(stamp))
            task = Task(id=task_id, context_id=context_id, status=status, history=(stored,))
            return TurnStart(task, True)

    @staticmethod
    def _check_follow_up(message: Message, head: _Head) -> None:
        state = TaskState(head.state)
        if message.context_id and message.context_id != head.context_id:
            raise InvalidParams(
                "params.message.contextId does not match the task's context",
                violations=[("params.message.contextId", "does not match the task's contextId")],
            )
        if state.is_terminal:
            raise UnsupportedOperation(
                "The task is in a terminal state; start a new task in the same context"
            )
        if not state.is_interrupted:
            raise UnsupportedOperation(
                "The task is still working; send a follow-up when it asks for input"
            )

    async def transition(
        self,
        task_id: str,
        to: TaskState,
        *,
        allowed_from: Iterable[TaskState] = NON_TERMINAL,
        status_message: Message | None = None,
        reply: Message | None = None,
        artifacts: Sequence[Artifact] = (),
    ) -> bool:
        """Move the task to `to` if (and only if) it is in one of `allowed_from`.

        One guarded UPDATE decides; artifacts, the agent's reply and the pushes for terminal and
        interrupted states are written in the same transaction. Returns whether this call won.
        """
        return await self._db.run(
            functools.partial(
                self._transition,
                task_id,
                to,
                allowed_from=tuple(allowed_from),
                status_message=status_message,
                reply=reply,
                artifacts=tuple(artifacts),
            )
        )

    def _transition(
        self,
        task_id: str,
        to: TaskState,
        *,
        allowed_from: tuple[TaskState, ...],
        status_message: Message | None,
        reply: Message | None,
        artifacts: tuple[Artifact, ...],
    ) -> bool:
        if to in TERMINAL_STATES:
            allowed_from = tuple(state for state in allowed_from if state not in TERMINAL_STATES)
        if not allowed_from:
            return False
        marks = ", ".join("?" * len(allowed_from))
        with self._db.write():
            won = (
                self._sql(
                    "UPDATE tasks SET state = ?, status_message = ?, status_ts = ?"
                    f" WHERE id = ? AND state IN ({marks})",
                    (
                        to.value,
                        _dump(status_message) if status_message else None,
                        now_us(),
                        task_id,
                        *(state.value for state in allowed_from),
                    ),
                ).rowcount
                == 1
            )
            if not won:
                return False
            for artifact in artifacts:
                self._sql(
                    "INSERT INTO artifacts (task_id, artifact_id, body) VALUES (?, ?, ?)"
                    " ON CONFLICT (task_id, artifact_id) DO UPDATE SET body = excluded.body",
                    (task_id, artifact.artifact_id, _dump(artifact)),
                )
            if reply is not None:
                tenant, issuer, subject, context_id = self._sql(
                    "SELECT tenant, issuer, subject, context_id FROM tasks WHERE id = ?", (task_id,)
                ).fetchone()
                message = attrs.evolve(reply, task_id=task_id, context_id=context_id)
                self._sql(
                    "INSERT INTO messages (task_id, tenant, issuer, subject, message_id, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (task_id, tenant, issuer, subject, message.message_id, _dump(message)),
                )
            if to in _NOTIFY:
                self._queue_pushes(task_id)
            return True

    async def begin_turn(self, task_id: str) -> tuple[Task, Identity] | None:
        """For the runner: move a SUBMITTED task to WORKING and return it with its owner, or
        `None` if it is no longer SUBMITTED (canceled, or taken by another runner)."""

        def begin() -> tuple[Task, Identity] | None:
            with self._db.write():
                won = (
                    self._sql(
                        "UPDATE tasks SET state = ?, status_ts = ? WHERE id = ? AND state = ?",
                        (
                            TaskState.TASK_STATE_WORKING.value,
                            now_us(),
                            task_id,
                            TaskState.TASK_STATE_SUBMITTED.value,
                        ),
                    ).rowcount
                    == 1
                )
                if not won:
                    return None
                owner = self._sql(
                    "SELECT tenant, issuer, subject FROM tasks WHERE id = ?", (task_id,)
                ).fetchone()
                return self._snapshot(task_id, None, include_artifacts=False), Identity(*owner)

        return await self._db.run(begin)

    async def cancel(self, caller: Identity, task_id: str) -> tuple[Task, bool]:
        """Cancel the caller's task; `TaskNotCancelable` if it is already terminal.

        Returns the updated task and whether this call's write won (a racing completion may win).
        """
        return await self._db.run(self._cancel, caller, task_id)

    def _cancel(self, caller: Identity, task_id: str) -> tuple[Task, bool]:
        head = self._owned(caller, task_id)
        if TaskState(head.state).is_terminal:
            raise TaskNotCancelable(metadata={"taskId": task_id})
        won = self._transition(
            task_id,
            TaskState.TASK_STATE_CANCELED,
            allowed_from=NON_TERMINAL,
            status_message=None,
            reply=None,
            artifacts=(),
        )
        if not won:
            raise TaskNotCancelable(metadata={"taskId": task_id})
        return self._snapshot(task_id, None, include_artifacts=True), won

    async def unfinished(self) -> list[str]:
        """This worker's tasks a crash may have left SUBMITTED or WORKING, oldest first."""

        def query() -> list[str]:
            rows = (
                TaskRow.select(TaskRow.id)
                .where(
                    TaskRow.state.in_(_RUNNING)
                    & (TaskRow.node == self._node)
                    & (TaskRow.worker == self._worker)
                )
                .order_by(TaskRow.created_ts)
            )
            return [row.id for row in rows]

        return await self._db.run(query)

    async def ended_among(self, task_ids: Sequence[str]) -> list[str]:
        """Those of `task_ids` in a terminal state."""

        def query() -> list[str]:
            ended = ", ".join(str(state.value) for state in TERMINAL_STATES)
            found = []
            for start in range(0, len(task_ids), 500):  # well under any placeholder limit
                chunk = task_ids[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                rows = self._sql(
                    f"SELECT id FROM tasks WHERE id IN ({marks}) AND state IN ({ended})", chunk
                ).fetchall()
                found += [task_id for (task_id,) in rows]
            return found

        return await self._db.run(query) if task_ids else []

    # -- reading ------------------------------------------------------------------------------

    async def get(self, caller: Identity, task_id: str, history_length: int | None = None) -> Task:
        def query() -> Task:
            self._owned(caller, task_id)
            return self._snapshot(task_id, history_length, include_artifacts=True)

        return await self._db.run(query)

    async def list_tasks(self, caller: Identity, request: ListTasksRequest) -> ListTasksResponse:
        return await self._db.run(self._list, caller, request)

    def _list(self, caller: Identity, request: ListTasksRequest) -> ListTasksResponse:
        size = request.page_size or DEFAULT_PAGE_SIZE
        query = _scoped(TaskRow, caller)
        if request.context_id:
            query = query.where(TaskRow.context_id == request.context_id)
        if request.status is not TaskState.TASK_STATE_UNSPECIFIED:
            query = query.where(TaskRow.state == request.status.value)
        if request.status_timestamp_after is not None:
            after = int(request.status_timestamp_after.timestamp() * 1_000_000)
            query = query.where(TaskRow.status_ts >= after)
        total = query.count()
        if request.page_token:
            ts, last_id = _read_cursor(request.page_token)
            query = query.where(
                (TaskRow.status_ts < ts) | ((TaskRow.status_ts == ts) & (TaskRow.id < last_id))
            )
        rows = list(query.order_by(TaskRow.status_ts.desc(), TaskRow.id.desc()).limit(size + 1))
        more = len(rows) > size
        rows = rows[:size]
        tasks = tuple(
            self._snapshot(
                row.id,
                request.history_length,
                include_artifacts=request.include_artifacts,
                head=_Head(row.id, row.context_id, row.state, row.status_message, row.status_ts),
            )
            for row in rows
        )
        token = _cursor(rows[-1].status_ts, rows[-1].id) if more else ""
        return ListTasksResponse(
            tasks=tasks, next_page_token=token, page_size=size, total_size=total
        )

    # -- push configs -------------------------------------------------------------------------

    async def put_push_config(
        self, caller: Identity, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        def write() -> TaskPushNotificationConfig:
            with self._db.write():
                self._owned(caller, config.task_id)
                return self._put_push_config(config.task_id, config)

        return await self._db.run(write)

    def _put_push_config(
        self, task_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        stored = attrs.evolve(config, task_id=task_id, id=config.id or str(uuid.uuid4()), tenant="")
        self._sql(
            "INSERT INTO push_configs (task_id, config_id, body) VALUES (?, ?, ?)"
            " ON CONFLICT (task_id, config_id) DO UPDATE SET body = excluded.body",
            (task_id, stored.id, _dump(stored)),
        )
        return stored

    async def get_push_config(
        self, caller: Identity, task_id: str, config_id: str
    ) -> TaskPushNotificationConfig:
        def read() -> TaskPushNotificationConfig:
            self._owned(caller, task_id)
            row = PushConfigRow.get_or_none(
                (PushConfigRow.task == task_id) & (PushConfigRow.config_id == config_id)
            )
            if row is None:
                raise TaskNotFound(
                    "Push notification config not found", metadata={"taskId": task_id}
                )
            return from_wire(json.loads(row.body), TaskPushNotificationConfig)

        return await self._db.run(read)

    async def list_push_configs(
        self, caller: Identity, task_id: str
    ) -> list[TaskPushNotificationConfig]:
        def read() -> list[TaskPushNotificationConfig]:
            self._owned(caller, task_id)
            rows = (
                PushConfigRow.select()
                .where(PushConfigRow.task == task_id)
                .order_by(PushConfigRow.seq)
            )
            return [from_wire(json.loads(row.body), TaskPushNotificationConfig) for row in rows]

        return await self._db.run(read)

    async def delete_push_config(self, caller: Identity, task_id: str, config_id: str) -> None:
        """Idempotent; queued deliveries to that config are dropped, so nothing more is sent."""

        def delete() -> None:
            with self._db.write():
                self._owned(caller, task_id)
                PushConfigRow.delete().where(
                    (PushConfigRow.task == task_id) & (PushConfigRow.config_id == config_id)
                ).execute()
                PushOutbox.update(state="dropped").where(
                    (PushOutbox.task_id == task_id)
                    & (PushOutbox.config_id == config_id)
                    & (PushOutbox.state == "pending")
                ).execute()

        await self._db.run(delete)

    # -- the outbox ---------------------------------------------------------------------------

    def _queue_pushes(self, task_id: str) -> None:
        configs = self._sql(
            "SELECT config_id, body FROM push_configs WHERE task_id = ? ORDER BY seq", (task_id,)
        ).fetchall()
        if not configs:
            return
        snapshot = StreamResponse(task=self._snapshot(task_id, 0, include_artifacts=True))
        body = json.dumps(to_wire(snapshot), separators=(",", ":"))
        stamp = now_us()
        for config_id, config in configs:
            settings = json.loads(config)
            url = settings.get("url", "")
            problems = _undeliverable(settings)
            # A config the edge refuses today may have been stored by an earlier release. It is
            # queued as failed, with the reason as its one attempt, so the terminal write that
            # queues it still commits and the other configs' pushes still go out.
            (outbox_id,) = self._sql(
                "INSERT INTO push_outbox (task_id, config_id, jti, url, body, state, attempts,"
                " next_attempt_ts, created_ts, node, worker)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    task_id,
                    printable(config_id),
                    str(uuid.uuid4()),
                    printable(url),
                    body,
                    "failed" if problems else "pending",
                    1 if problems else 0,
                    stamp,
                    stamp,
                    self._node,
                    self._worker,
                ),
            ).fetchone()
            if problems:
                self._sql(
                    "INSERT INTO push_attempts (outbox_id, attempt, at_ts, status, error,"
                    " duration_ms) VALUES (?, 1, ?, NULL, ?, 0)",
                    (outbox_id, stamp, f"undeliverable config: {problems}"),
                )

    async def due_pushes(self, limit: int = 32) -> list[OutboxItem]:
        """Pending deliveries that are due, with their config's credentials."""

        def read() -> list[OutboxItem]:
            rows = self._sql(
                "SELECT o.id, o.task_id, o.config_id, o.jti, o.url, o.body, o.attempts,"
                " o.created_ts, c.body FROM push_outbox o LEFT JOIN push_configs c"
                " ON c.task_id = o.task_id AND c.config_id = o.config_id"
                " WHERE o.node = ? AND o.worker = ? AND o.state = 'pending'"
                " AND o.next_attempt_ts <= ? ORDER BY o.next_attempt_ts LIMIT ?",
                (self._node, self._worker, now_us(), limit),
            ).fetchall()
            items = []
            for row_id, task_id, config_id, jti, url, body, attempts, created, config in rows:
                if config is None:  # deleted since: nothing more is sent there
                    self._sql("UPDATE push_outbox SET state = 'dropped' WHERE id = ?", (row_id,))
                    continue
                settings = json.loads(config)
                auth = settings.get("authentication")
                credentials = (auth["scheme"], auth.get("credentials", "")) if auth else None
                items.append(
                    OutboxItem(
                        id=row_id, task_id=task_id, config_id=config_id, jti=jti, url=url,
                        body=body.encode(), attempts=attempts, created_ts=created,
                        token=settings.get("token", ""),
                        authentication=credentials,
                    )
                )  # fmt: skip
            return items

        return await self._db.run(read)

    async def next_push_due(self) -> int | None:
        """When the next pending push is due (µs since the epoch), or `None`."""

        def read() -> int | None:
            (due,) = self._sql(
                "SELECT MIN(next_attempt_ts) FROM push_outbox"
                " WHERE node = ? AND worker = ? AND state = 'pending'",
                (self._node, self._worker),
            ).fetchone()
            return int(due) if due is not None else None

        return await self._db.run(read)

    async def record_attempt(
        self,
        item: OutboxItem,
        *,
        status: int | None,
        error: str | None,
        duration_ms: int,
        outcome: str,
        next_attempt_ts: int | None = None,
    ) -> None:
        """Record one delivery attempt; `outcome` is the item's new state (`pending` to retry)."""

        def write() -> None:
            with self._db.write():
                self._sql(
                    "INSERT INTO push_attempts (outbox_id, attempt, at_ts, status, error,"
                    " duration_ms) VALUES (?, ?, ?, ?, ?, ?)",
                    (item.id, item.attempts + 1, now_us(), status, error, duration_ms),
                )
                self._sql(
                    "UPDATE push_outbox SET attempts = ?, state = ?,"
                    " next_attempt_ts = COALESCE(?, next_attempt_ts) WHERE id = ?",
                    (item.attempts + 1, outcome, next_attempt_ts, item.id),
                )

        await self._db.run(write)

    async def outbox(self, task_id: str) -> list[dict[str, Any]]:
        """The outbox rows of a task with their attempts (for `looping tasks` and tests)."""

        def read() -> list[dict[str, Any]]:
            result = []
            for row in (
                PushOutbox.select().where(PushOutbox.task_id == task_id).order_by(PushOutbox.id)
            ):
                attempts = [
                    {"attempt": a.attempt, "status": a.status, "error": a.error}
                    for a in PushAttempt.select()
                    .where(PushAttempt.outbox == row.id)
                    .order_by(PushAttempt.attempt)
                ]
                result.append(
                    {"jti": row.jti, "state": row.state, "url": row.url, "attempts": attempts}
                )
            return result

        return await self._db.run(read)

    # -- helpers (store thread only) ----------------------------------------------------------

    def _owned(self, caller: Identity, task_id: str) -> _Head:
        row = self._sql(
            f"{_HEAD} WHERE id = ? AND tenant = ? AND issuer = ? AND subject = ?",
            (task_id, caller.tenant, caller.issuer, caller.subject),
        ).fetchone()
        if row is None:
            raise TaskNotFound(metadata={"taskId": task_id})
        return _Head(*row)

    def _snapshot(
        self,
        task_id: str,
        history_length: int | None,
        *,
        include_artifacts: bool,
        head: _Head | None = None,
    ) -> Task:
        head = head or _Head(*self._sql(f"{_HEAD} WHERE id = ?", (task_id,)).fetchone())
        history: tuple[Message, ...] = ()
        if history_length != 0:
            statement = "SELECT body FROM messages WHERE task_id = ? ORDER BY seq DESC"
            params: tuple[Any, ...] = (task_id,)
            if history_length is not None:
                statement += " LIMIT ?"
                params = (task_id, history_length)
            bodies = [body for (body,) in self._sql(statement, params).fetchall()]
            history = tuple(from_wire(json.loads(body), Message) for body in reversed(bodies))
        artifacts: tuple[Artifact, ...] = ()
        if include_artifacts:
            rows = self._sql(
                "SELECT body FROM artifacts WHERE task_id = ? ORDER BY seq", (task_id,)
            ).fetchall()
            artifacts = tuple(from_wire(json.loads(body), Artifact) for (body,) in rows)
        status_message = (
            from_wire(json.loads(head.status_message), Message) if head.status_message else None
        )
        status = TaskStatus(
            state=TaskState(head.state),
            message=status_message,
            timestamp=_timestamp(head.status_ts),
        )
        return Task(
            id=head.id,
            context_id=head.context_id,
            status=status,
            artifacts=artifacts,
            history=history,
        )


def _scoped(model: Any, caller: Identity) -> Any:
    return model.select().where(
        (model.tenant == caller.tenant)
        & (model.issuer == caller.issuer)
        & (model.subject == caller.subject)
    )


def _cursor(ts: int, task_id: str) -> str:
    raw = json.dumps({"ts": ts, "id": task_id}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _undeliverable(settings: dict[str, Any]) -> str:
    """Why a stored push config cannot be delivered ("" if it can), without its values."""
    auth = settings.get("authentication")
    return undeliverable_reason(
        settings.get("url", ""),
        settings.get("token", ""),
        auth.get("scheme", "") if auth else None,
        auth.get("credentials", "") if auth else "",
    )


def _read_cursor(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        ts, task_id = data["ts"], data["id"]
        if not isinstance(ts, int) or not isinstance(task_id, str):
            raise ValueError
        if not 0 <= ts < 2**63 or id_problem(task_id, required=True) is not None:
            raise ValueError
    except (ValueError, KeyError, TypeError, RecursionError):
        raise InvalidParams(
            "params.pageToken is not a token this server issued",
            violations=[("params.pageToken", "not a valid page token")],
        ) from None
    return ts, task_id


def adopt_orphans(database: Database, node: str, workers: int) -> int:
    """Give `node`'s running tasks and pending pushes of worker slots beyond `workers` to its
    live slots, and take those written before rows had an owner (node "").

    Runs once when `node`'s server starts, before any of its workers, on the store's thread: each
    worker then recovers and delivers only its own slot's rows, so no two processes touch the same
    turn. Other nodes' rows are never touched. Returns how many rows moved.
    """
    tasks, pushes = _move_rows(
        database, "(node = '' OR (node = ? AND worker >= ?))", (node, workers), node, workers
    )
    return tasks + pushes


def adopt_node(database: Database, gone: str, node: str, workers: int) -> tuple[int, int]:
    """Give the unfinished tasks and pending pushes of node `gone` (a machine that will not
    come back) to `node`, spread over its `workers` slots; on the store's thread.

    Its pushes go out from `node`'s running server; its turns are recovered (resumed or failed)
    when `node`'s server next starts. Returns (tasks, pushes) moved.
    """
    return _move_rows(database, "node = ?", (gone,), node, workers)


def _move_rows(
    database: Database, owned: str, params: tuple[Any, ...], node: str, workers: int
) -> tuple[int, int]:
    """Hand running tasks and pending pushes matching `owned` to `node`'s slots (slot mod N)."""
    running = ", ".join(str(state) for state in _RUNNING)
    modulo = "worker - (worker / ?) * ?"  # integer division in both stores; `%` means a parameter
    with database.write():
        tasks = database.execute(
            f"UPDATE tasks SET node = ?, worker = {modulo} WHERE {owned} AND state IN ({running})",
            (node, workers, workers, *params),
        ).rowcount
        pushes = database.execute(
            f"UPDATE push_outbox SET node = ?, worker = {modulo}"
            f" WHERE {owned} AND state = 'pending'",
            (node, workers, workers, *params),
        ).rowcount
    return int(tasks), int(pushes)
