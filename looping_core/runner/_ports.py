"""What the runners and the deliverer need of the task store, each as a small protocol typed by
its consumer: the turn driver's records (`TurnRecords`), a runner's look at task states
(`TaskStates`), and the push outbox (`PushOutbox`, with the job engine's reads in `JobPushes`).
`TaskStore` is all of them; a test can give a runner a part of its own, and a later change can
hand each tenant its own store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from looping_core.a2a import Artifact, Message, Task, TaskState
from looping_core.contract import Identity
from looping_core.store.internal import (
    BegunTurn,
    JobTicket,
    OutboxItem,
    PendingPushes,
    TurnEnd,
)

__all__ = ["JobPushes", "PushOutbox", "TaskStates", "TurnRecords"]


class TaskStates(Protocol):
    """What a runner looks up about tasks: their states, and the turns a crash left."""

    async def task_state(self, task_id: str) -> TaskState | None: ...
    async def unfinished(self) -> list[str]: ...
    async def ended_among(self, task_ids: Sequence[str]) -> list[str]: ...


class TurnRecords(TaskStates, Protocol):
    """What the turn driver writes and reads of a task's turns, its events included."""

    async def begin_turn(self, task_id: str) -> BegunTurn | None: ...
    async def end_turn(
        self,
        task_id: str,
        to: TaskState,
        *,
        status_message: Message | None = None,
        reply: Message | None = None,
        artifacts: Sequence[Artifact] = (),
        metadata: Mapping[str, Any] | None = None,
        taken_through: str | None = None,
        answer_with_message: bool = False,
        job: JobTicket | None = None,
        spent: float | None = None,
        context_id: str | None = None,
    ) -> TurnEnd: ...
    async def transition(
        self,
        task_id: str,
        to: TaskState,
        *,
        allowed_from: Iterable[TaskState] = ...,
        status_message: Message | None = None,
        reply: Message | None = None,
        artifacts: Sequence[Artifact] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> bool: ...
    async def next_turn(
        self,
        task_id: str,
        message_id: str,
        *,
        reply: Message | None,
        artifacts: Sequence[Artifact],
        metadata: Mapping[str, Any] | None,
        spent: float | None = None,
    ) -> bool: ...
    async def arrivals(self, task_id: str, after: str) -> list[Message]: ...
    async def get(
        self, caller: Identity, task_id: str, history_length: int | None = None
    ) -> Task: ...
    async def canceled_metadata(self, task_id: str, metadata: Mapping[str, Any]) -> bool: ...
    async def progress(self, task_id: str, message: Message, *, push: bool) -> bool: ...
    async def artifact_update(
        self, task_id: str, artifact: Artifact, *, append: bool, last_chunk: bool
    ) -> bool: ...


class PushOutbox(Protocol):
    """What the push deliverer reads and records."""

    def watch_pushes(self, listener: Callable[[], None]) -> None: ...
    async def due_pushes(self, limit: int = 32) -> list[OutboxItem]: ...
    async def pending_pushes(self) -> PendingPushes: ...
    async def record_attempt(
        self,
        item: OutboxItem,
        *,
        status: int | None,
        error: str | None,
        duration_ms: int,
        outcome: str,
        next_attempt_ts: int | None = None,
        job: JobTicket | None = None,
    ) -> bool: ...


class JobPushes(Protocol):
    """What the job engine reads of the outbox: the pushes its jobs deliver."""

    async def untried_pushes(self, task_id: str) -> list[OutboxItem]: ...
    async def pending_push(self, outbox_id: int) -> OutboxItem | None: ...
