"""Subtasks: the durable rows of a task's delegation plans (migration 6).

A plan's subtasks are added in one transaction, all or none (an id the task already has refuses
the whole plan). Each later change of a subtask (started, done, failed, its attempts, usage and
timings) is one write of its row. Reads return them in the order they were added.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import peewee

from looping_core.contract import SubtaskRecord
from looping_core.store._errors import StoreRefusal
from looping_core.store._rows import StoreBase

__all__ = ["SubtaskStore"]

_PLAN = ("task_id", "subtask_id", "type_key", "params", "depends_on", "round", "created_ts")
"""What a plan sets once."""
_PROGRESS = (
    "state", "result", "reason", "attempts", "fingerprint", "wave", "usage", "cost",
    "started_ts", "ended_ts",
)  # fmt: skip
"""What running the subtask changes."""
_COLUMNS = ", ".join(_PLAN + _PROGRESS)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True)


class SubtaskStore(StoreBase):
    """Async subtask storage; every call runs on the database's own thread."""

    async def add(self, subtasks: Sequence[SubtaskRecord]) -> None:
        """Store a plan's subtasks in one transaction; `StoreRefusal` if an id is taken."""
        try:
            await self._db.run(self._add, tuple(subtasks))
        except peewee.IntegrityError:
            raise StoreRefusal("a subtask with one of these ids exists already") from None

    def _add(self, subtasks: tuple[SubtaskRecord, ...]) -> None:
        with self._db.write():
            for subtask in subtasks:
                (last,) = self._sql(
                    "SELECT MAX(seq) FROM subtasks WHERE task_id = ?", (subtask.task_id,)
                ).fetchone()
                marks = ", ".join("?" * (len(_PLAN) + len(_PROGRESS) + 1))
                self._sql(
                    f"INSERT INTO subtasks ({_COLUMNS}, seq) VALUES ({marks})",
                    (*_plan(subtask), *_progress(subtask), 0 if last is None else int(last) + 1),
                )

    async def subtasks(self, task_id: str) -> list[SubtaskRecord]:
        """The task's subtasks in the order they were added."""

        def query() -> list[SubtaskRecord]:
            rows = self._sql(
                f"SELECT {_COLUMNS} FROM subtasks WHERE task_id = ? ORDER BY seq", (task_id,)
            ).fetchall()
            return [_record(row) for row in rows]

        return await self._db.run(query)

    async def update(self, subtask: SubtaskRecord) -> None:
        """Write the subtask's state, result and bookkeeping (its plan fields never change)."""

        def write() -> None:
            with self._db.write():
                assignments = ", ".join(f"{column} = ?" for column in _PROGRESS)
                self._sql(
                    f"UPDATE subtasks SET {assignments} WHERE task_id = ? AND subtask_id = ?",
                    (*_progress(subtask), subtask.task_id, subtask.subtask_id),
                )

        await self._db.run(write)


def _plan(subtask: SubtaskRecord) -> tuple[Any, ...]:
    """The `_PLAN` columns' values."""
    return (
        subtask.task_id,
        subtask.subtask_id,
        subtask.type_key,
        _json(dict(subtask.params)),
        _json(list(subtask.depends_on)),
        subtask.round,
        subtask.created_us,
    )


def _progress(subtask: SubtaskRecord) -> tuple[Any, ...]:
    """The `_PROGRESS` columns' values."""
    return (
        subtask.state,
        _json(subtask.result),
        subtask.reason,
        subtask.attempts,
        subtask.fingerprint,
        subtask.wave,
        _json(None if subtask.usage is None else dict(subtask.usage)),
        subtask.cost,
        subtask.started_us,
        subtask.ended_us,
    )


def _record(row: tuple[Any, ...]) -> SubtaskRecord:
    (task_id, subtask_id, type_key, params, depends_on, round_, created, state, result, reason,
     attempts, fingerprint, wave, usage, cost, started, ended) = row  # fmt: skip
    return SubtaskRecord(
        task_id=task_id,
        subtask_id=subtask_id,
        type_key=type_key,
        params=json.loads(params),
        depends_on=tuple(json.loads(depends_on)),
        round=int(round_),
        state=state,
        result=None if result is None else json.loads(result),
        reason=reason,
        attempts=int(attempts),
        fingerprint=fingerprint,
        wave=None if wave is None else int(wave),
        usage=None if usage is None else json.loads(usage),
        cost=None if cost is None else float(cost),
        created_us=int(created),
        started_us=None if started is None else int(started),
        ended_us=None if ended is None else int(ended),
    )
