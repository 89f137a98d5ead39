"""Reading tasks: the caller's, one by id or a filtered, cursor-paged list (newest first); and for
the runners, a task's state, this worker's unfinished tasks, which of some have ended."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Sequence
from typing import Any

import attrs

from looping_core.a2a import TERMINAL_STATES, Task, TaskState
from looping_core.a2a.internal import Int64, ListTasksRequest, ListTasksResponse, id_problem
from looping_core.contract import Identity
from looping_core.store._errors import InvalidPageToken
from looping_core.store._migrations import MIGRATIONS
from looping_core.store._models import TaskRow
from looping_core.store._rows import RUNNING, Head, StoreBase

__all__ = ["DEFAULT_PAGE_SIZE", "Reads"]

DEFAULT_PAGE_SIZE = 50


class Reads(StoreBase):
    async def unready(self, timeout: float) -> str | None:
        """Why the store cannot serve now (`"not answering"`, `"migrations pending"`), or
        `None`: for a readiness probe, within `timeout` seconds, naming nothing more."""

        def read() -> int | None:
            (latest,) = self._sql("SELECT MAX(version) FROM core_migration").fetchone()
            return int(latest) if latest is not None else None

        try:
            async with asyncio.timeout(timeout):
                try:
                    latest = await self._db.run(read)
                except Exception:
                    # A connection left dead by an outage fails once, then its thread (and
                    # every other) connects afresh: only a second failure means the store is down.
                    latest = await self._db.run(read)
        except Exception:
            return "not answering"
        return None if latest == MIGRATIONS[-1].version else "migrations pending"

    async def get(self, caller: Identity, task_id: str, history_length: int | None = None) -> Task:
        def query() -> Task:
            self._owned(caller, task_id)
            return self._snapshot(task_id, history_length, include_artifacts=True)

        return await self._db.read(query)

    async def list_tasks(
        self, caller: Identity, request: ListTasksRequest, *, generations: bool = False
    ) -> ListTasksResponse:
        """A page of the caller's tasks; with `generations`, each with its generation (the A2A
        1.1 draft: read with the task's row, in the one snapshot the page is read in, so it is
        the generation of what the task shows)."""
        return await self._db.read(self._list, caller, request, generations)

    def _list(
        self, caller: Identity, request: ListTasksRequest, generations: bool = False
    ) -> ListTasksResponse:
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
        tasks = []
        for row in rows:
            task = self._snapshot(
                row.id,
                request.history_length,
                include_artifacts=request.include_artifacts,
                head=Head(
                    row.id,
                    row.context_id,
                    row.state,
                    row.status_message,
                    row.status_ts,
                    row.metadata,
                    row.reply_in_status,
                ),
            )
            if generations:
                task = attrs.evolve(task, generation=Int64(row.event_seq + 1))
            tasks.append(task)
        token = _cursor(rows[-1].status_ts, rows[-1].id) if more else ""
        return ListTasksResponse(
            tasks=tuple(tasks), next_page_token=token, page_size=size, total_size=total
        )

    async def task_state(self, task_id: str) -> TaskState | None:
        """The task's state now (`None`: no such task), whoever owns it."""

        def read() -> TaskState | None:
            row = self._sql("SELECT state FROM tasks WHERE id = ?", (task_id,)).fetchone()
            return TaskState(row[0]) if row is not None else None

        return await self._db.run(read)

    async def unfinished(self) -> list[str]:
        """This worker's tasks a crash may have left SUBMITTED or WORKING, oldest first."""

        def query() -> list[str]:
            rows = (
                TaskRow.select(TaskRow.id)
                .where(
                    TaskRow.state.in_(RUNNING)
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
        if not 0 <= ts < 2**63 or id_problem(task_id, required=True) is not None:
            raise ValueError
    except (ValueError, KeyError, TypeError, RecursionError):
        raise InvalidPageToken() from None
    return ts, task_id
