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
    MessageRow,
    PushAttempt,
    PushConfigRow,
    PushOutbox,
    TaskArtifactRow,
    TaskRow,
)

__all__ = ["NON_TERMINAL", "OutboxItem", "TaskStore", "TurnStart", "now_us"]

NON_TERMINAL = tuple(state for state in TaskState if state not in TERMINAL_STATES)
_NOTIFY = TERMINAL_STATES | {
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}
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


class TaskStore:
    """Async task storage; every call runs on the database's own thread."""

    def __init__(self, database: Database) -> None:
        self._db = database

    # -- turns --------------------------------------------------------------------------------

    async def start_turn(
        self, caller: Identity, message: Message, push: TaskPushNotificationConfig | None
    ) -> TurnStart:
        """Accept a user message exactly once per (caller, messageId): a new task, or a follow-up
        to an interrupted one. A duplicate returns the first task and starts nothing."""
        return await self._db.run(self._start_turn, caller, message, push)

    def _start_turn(
        self, caller: Identity, message: Message, push: TaskPushNotificationConfig | None
    ) -> TurnStart:
        with self._db.peewee.atomic():
            duplicate = (
                _scoped(MessageRow, caller)
                .where(MessageRow.message_id == message.message_id)
                .first()
            )
            if duplicate is not None:
                return TurnStart(
                    self._snapshot(duplicate.task_id, None, include_artifacts=True), False
                )
            stamp = now_us()
            if message.task_id:
                row = self._owned(caller, message.task_id)
                state = TaskState(row.state)
                if message.context_id and message.context_id != row.context_id:
                    raise InvalidParams(
                        "params.message.contextId does not match the task's context",
                        violations=[
                            ("params.message.contextId", "does not match the task's contextId")
                        ],
                    )
                if state.is_terminal:
                    raise UnsupportedOperation(
                        "The task is in a terminal state; start a new task in the same context"
                    )
                if not state.is_interrupted:
                    raise UnsupportedOperation(
                        "The task is still working; send a follow-up when it asks for input"
                    )
                updated = (
                    TaskRow.update(
                        state=TaskState.TASK_STATE_SUBMITTED.value,
                        status_message=None,
                        status_ts=stamp,
                    )
                    .where((TaskRow.id == row.id) & (TaskRow.state == row.state))
                    .execute()
                )
                if updated != 1:
                    raise UnsupportedOperation("The task changed state; fetch it and try again")
                task_id, context_id = row.id, row.context_id
            else:
                task_id = str(uuid.uuid4())
                context_id = message.context_id or str(uuid.uuid4())
                TaskRow.create(
                    id=task_id,
                    tenant=caller.tenant,
                    issuer=caller.issuer,
                    subject=caller.subject,
                    context_id=context_id,
                    state=TaskState.TASK_STATE_SUBMITTED.value,
                    status_ts=stamp,
                    created_ts=stamp,
                )
            stored = attrs.evolve(message, task_id=task_id, context_id=context_id)
            MessageRow.create(
                task=task_id,
                tenant=caller.tenant,
                issuer=caller.issuer,
                subject=caller.subject,
                message_id=message.message_id,
                body=_dump(stored),
            )
            if push is not None:
                # An inline config without an id takes the task's id (as the official SDK does),
                # so the config a gateway re-sends with every turn replaces itself.
                self._put_push_config(task_id, attrs.evolve(push, id=push.id or task_id))
            return TurnStart(self._snapshot(task_id, None, include_artifacts=True), True)

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
        with self._db.peewee.atomic():
            won = (
                TaskRow.update(
                    state=to.value,
                    status_message=_dump(status_message) if status_message else None,
                    status_ts=now_us(),
                )
                .where(
                    (TaskRow.id == task_id) & (TaskRow.state.in_([s.value for s in allowed_from]))
                )
                .execute()
            ) == 1
            if not won:
                return False
            row = TaskRow.get_by_id(task_id)
            for artifact in artifacts:
                TaskArtifactRow.insert(
                    task=task_id, artifact_id=artifact.artifact_id, body=_dump(artifact)
                ).on_conflict(
                    conflict_target=[TaskArtifactRow.task, TaskArtifactRow.artifact_id],
                    update={TaskArtifactRow.body: _dump(artifact)},
                ).execute()
            if reply is not None:
                message = attrs.evolve(reply, task_id=task_id, context_id=row.context_id)
                MessageRow.create(
                    task=task_id, tenant=row.tenant, issuer=row.issuer, subject=row.subject,
                    message_id=message.message_id, body=_dump(message),
                )  # fmt: skip
            if to in _NOTIFY:
                self._queue_pushes(task_id)
            return True

    async def cancel(self, caller: Identity, task_id: str) -> tuple[Task, bool]:
        """Cancel the caller's task; `TaskNotCancelable` if it is already terminal.

        Returns the updated task and whether this call's write won (a racing completion may win).
        """
        return await self._db.run(self._cancel, caller, task_id)

    def _cancel(self, caller: Identity, task_id: str) -> tuple[Task, bool]:
        row = self._owned(caller, task_id)
        if TaskState(row.state).is_terminal:
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
        """Tasks a crash may have left SUBMITTED or WORKING, oldest first."""

        def query() -> list[str]:
            states = [TaskState.TASK_STATE_SUBMITTED.value, TaskState.TASK_STATE_WORKING.value]
            rows = (
                TaskRow.select(TaskRow.id)
                .where(TaskRow.state.in_(states))
                .order_by(TaskRow.created_ts)
            )
            return [row.id for row in rows]

        return await self._db.run(query)

    # -- reading ------------------------------------------------------------------------------

    async def get(self, caller: Identity, task_id: str, history_length: int | None = None) -> Task:
        def query() -> Task:
            self._owned(caller, task_id)
            return self._snapshot(task_id, history_length, include_artifacts=True)

        return await self._db.run(query)

    async def get_unscoped(self, task_id: str) -> tuple[Task, Identity]:
        """For the runner, which acts for the task's owner."""

        def query() -> tuple[Task, Identity]:
            row = TaskRow.get_by_id(task_id)
            return self._snapshot(task_id, None, include_artifacts=True), Identity(
                row.tenant, row.issuer, row.subject
            )

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
                row.id, request.history_length, include_artifacts=request.include_artifacts, row=row
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
            with self._db.peewee.atomic():
                self._owned(caller, config.task_id)
                return self._put_push_config(config.task_id, config)

        return await self._db.run(write)

    def _put_push_config(
        self, task_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        stored = attrs.evolve(config, task_id=task_id, id=config.id or str(uuid.uuid4()), tenant="")
        PushConfigRow.insert(task=task_id, config_id=stored.id, body=_dump(stored)).on_conflict(
            conflict_target=[PushConfigRow.task, PushConfigRow.config_id],
            update={PushConfigRow.body: _dump(stored)},
        ).execute()
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
            with self._db.peewee.atomic():
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
        configs = (
            PushConfigRow.select().where(PushConfigRow.task == task_id).order_by(PushConfigRow.seq)
        )
        if not configs:
            return
        body = json.dumps(
            to_wire(StreamResponse(task=self._snapshot(task_id, 0, include_artifacts=True))),
            separators=(",", ":"),
        )
        stamp = now_us()
        for row in configs:
            config = from_wire(json.loads(row.body), TaskPushNotificationConfig)
            PushOutbox.create(
                task_id=task_id, config_id=row.config_id, jti=str(uuid.uuid4()), url=config.url,
                body=body, next_attempt_ts=stamp, created_ts=stamp,
            )  # fmt: skip

    async def due_pushes(self, limit: int = 32) -> list[OutboxItem]:
        def read() -> list[OutboxItem]:
            rows = (
                PushOutbox.select()
                .where((PushOutbox.state == "pending") & (PushOutbox.next_attempt_ts <= now_us()))
                .order_by(PushOutbox.next_attempt_ts)
                .limit(limit)
            )
            items = []
            for row in rows:
                config_row = PushConfigRow.get_or_none(
                    (PushConfigRow.task == row.task_id) & (PushConfigRow.config_id == row.config_id)
                )
                if config_row is None:  # deleted since: nothing more is sent there
                    PushOutbox.update(state="dropped").where(PushOutbox.id == row.id).execute()
                    continue
                config = from_wire(json.loads(config_row.body), TaskPushNotificationConfig)
                auth = config.authentication
                items.append(
                    OutboxItem(
                        id=row.id, task_id=row.task_id, config_id=row.config_id, jti=row.jti,
                        url=row.url, body=row.body.encode(), attempts=row.attempts,
                        created_ts=row.created_ts, token=config.token,
                        authentication=(auth.scheme, auth.credentials) if auth else None,
                    )
                )  # fmt: skip
            return items

        return await self._db.run(read)

    async def next_push_due(self) -> int | None:
        """When the next pending push is due (µs since the epoch), or `None`."""

        def read() -> int | None:
            row = (
                PushOutbox.select(peewee.fn.MIN(PushOutbox.next_attempt_ts))
                .where(PushOutbox.state == "pending")
                .scalar()
            )
            return int(row) if row is not None else None

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
            with self._db.peewee.atomic():
                PushAttempt.create(
                    outbox=item.id, attempt=item.attempts + 1, at_ts=now_us(), status=status,
                    error=error, duration_ms=duration_ms,
                )  # fmt: skip
                update: dict[Any, Any] = {
                    PushOutbox.attempts: item.attempts + 1,
                    PushOutbox.state: outcome,
                }
                if next_attempt_ts is not None:
                    update[PushOutbox.next_attempt_ts] = next_attempt_ts
                PushOutbox.update(update).where(PushOutbox.id == item.id).execute()

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

    def _owned(self, caller: Identity, task_id: str) -> TaskRow:
        row = _scoped(TaskRow, caller).where(TaskRow.id == task_id).first()
        if row is None:
            raise TaskNotFound(metadata={"taskId": task_id})
        owned: TaskRow = row
        return owned

    def _snapshot(
        self,
        task_id: str,
        history_length: int | None,
        *,
        include_artifacts: bool,
        row: TaskRow | None = None,
    ) -> Task:
        row = row or TaskRow.get_by_id(task_id)
        history: tuple[Message, ...] = ()
        if history_length != 0:
            query = (
                MessageRow.select(MessageRow.body)
                .where(MessageRow.task == task_id)
                .order_by(MessageRow.seq.desc())
            )
            if history_length is not None:
                query = query.limit(history_length)
            history = tuple(reversed([from_wire(json.loads(m.body), Message) for m in query]))
        artifacts: tuple[Artifact, ...] = ()
        if include_artifacts:
            rows = (
                TaskArtifactRow.select()
                .where(TaskArtifactRow.task == task_id)
                .order_by(TaskArtifactRow.seq)
            )
            artifacts = tuple(from_wire(json.loads(a.body), Artifact) for a in rows)
        status_message = (
            from_wire(json.loads(row.status_message), Message) if row.status_message else None
        )
        return Task(
            id=row.id,
            context_id=row.context_id,
            status=TaskStatus(
                state=TaskState(row.state),
                message=status_message,
                timestamp=_timestamp(row.status_ts),
            ),
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


def _read_cursor(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        ts, task_id = data["ts"], data["id"]
        if not isinstance(ts, int) or not isinstance(task_id, str):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise InvalidParams(
            "params.pageToken is not a token this server issued",
            violations=[("params.pageToken", "not a valid page token")],
        ) from None
    return ts, task_id
