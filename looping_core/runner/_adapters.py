"""What the runner hands an agent for one turn, each over the store: its events
(`TurnEventWriter`), its session (`TurnSession`), its subtasks (`TaskSubtasks`), its tool calls
that wait for approval (`TaskApprovals`) and the task's earlier messages as content
(`EarlierMessages`, converted only when read). Each store call waits
out a short outage (`patiently`): the agent goes on where it was instead of running again.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator, Sequence
from typing import overload

import attrs

from looping_core.a2a import (
    Artifact,
    Message,
    Part,
    Task,
    agent_message,
    message_content,
    reply_parts,
)
from looping_core.agent import ArtifactOut
from looping_core.content import Block, ToolApproval
from looping_core.content import Message as ContentMessage
from looping_core.contract import SessionRef, SubtaskRecord
from looping_core.runner._patience import patiently
from looping_core.runner._ports import TurnRecords
from looping_core.store.internal import ApprovalStore, SessionStore, SubtaskStore

__all__ = ["EarlierMessages", "TaskApprovals", "TaskSubtasks", "TurnEventWriter", "TurnSession"]

SUBAGENT_SEPARATOR = "\x1f"
"""Joins a conversation, a task and a scope into a subagent session's context."""


class EarlierMessages(Sequence[ContentMessage]):
    """The task's messages before this turn's, as content: converted on first read, so a turn
    whose agent reads its session (and whose gates read no history) converts nothing."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = messages

    @functools.cached_property
    def _content(self) -> tuple[ContentMessage, ...]:
        converted = (message_content(message) for message in self._messages)
        return tuple(message for message in converted if message is not None)

    @overload
    def __getitem__(self, index: int) -> ContentMessage: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ContentMessage]: ...
    def __getitem__(self, index: int | slice) -> ContentMessage | Sequence[ContentMessage]:
        return self._content[index]

    def __len__(self) -> int:
        return len(self._content)

    def __iter__(self) -> Iterator[ContentMessage]:
        return iter(self._content)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EarlierMessages):
            return self._content == other._content
        return isinstance(other, tuple | list) and list(self._content) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EarlierMessages({len(self._messages)} stored)"


class TurnEventWriter:
    """A turn's progress and early artifacts, written as the task's events. Appended chunks of
    an artifact wait up to `coalesce` seconds and go out as one event, so a fast model cannot
    flood the store; anything else first sends what waits, so events keep their order."""

    def __init__(self, store: TurnRecords, task: Task, push: bool, coalesce: float) -> None:
        self._store = store
        self._task = task
        self._task_id = task.id
        self._push = push
        self._coalesce = coalesce
        self._waiting: dict[str, tuple[Artifact, bool]] = {}
        """Chunks not sent yet, by artifact: the artifact with all their parts, last_chunk."""
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None

    async def progress(self, blocks: Sequence[Block]) -> None:
        await self.flush()
        message = agent_message(reply_parts(blocks), task=self._task)
        async with self._lock:
            await patiently(lambda: self._store.progress(self._task_id, message, push=self._push))

    async def artifact(
        self, artifact: ArtifactOut, *, append: bool = False, last_chunk: bool = False
    ) -> None:
        parts = reply_parts(artifact.blocks)
        if not parts:
            return
        wire = Artifact(
            artifact_id=artifact.artifact_id,
            parts=parts,
            name=artifact.name,
            description=artifact.description,
        )
        if not append:
            await self.flush()
            async with self._lock:
                await patiently(
                    lambda: self._store.artifact_update(
                        self._task_id, wire, append=False, last_chunk=last_chunk
                    )
                )
            return
        waiting = self._waiting.get(artifact.artifact_id)
        if waiting is not None:
            wire = attrs.evolve(waiting[0], parts=_joined(waiting[0].parts, parts))
        self._waiting[artifact.artifact_id] = (wire, last_chunk)
        if last_chunk or self._coalesce <= 0:
            await self.flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._coalesce, self._flush_later)

    def _flush_later(self) -> None:
        self._timer = None
        self._flushing = asyncio.create_task(self.flush(), name=f"looping-events-{self._task_id}")

    async def flush(self) -> None:
        """Send the chunks that wait (the runner calls it when the turn ends)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self._lock:
            waiting, self._waiting = self._waiting, {}
            for artifact, last_chunk in waiting.values():
                await patiently(
                    functools.partial(
                        self._store.artifact_update,
                        self._task_id,
                        artifact,
                        append=True,
                        last_chunk=last_chunk,
                    )
                )


def _joined(first: tuple[Part, ...], then: tuple[Part, ...]) -> tuple[Part, ...]:
    """Parts of two chunks as one: text running on from text is one text part."""
    if first and then and _plain_text(first[-1]) and _plain_text(then[0]):
        merged = Part(text=(first[-1].text or "") + (then[0].text or ""))
        return (*first[:-1], merged, *then[1:])
    return first + then


def _plain_text(part: Part) -> bool:
    return part.text is not None and not part.metadata and not part.filename


class TurnSession:
    """The caller's session as the agent sees it: bound to its conversation and to this turn (a
    task's follow-up is a new turn; a resumed turn is the same one). It also hands the turn the
    follow-ups that join it, and remembers the last one it took (`taken_through`)."""

    def __init__(
        self,
        sessions: SessionStore,
        tasks: TurnRecords,
        session: SessionRef,
        task_id: str,
        turn: str,
        *,
        takes_follow_ups: bool = True,
    ) -> None:
        self._takes_follow_ups = takes_follow_ups
        self._sessions = sessions
        self._tasks = tasks
        self._session = session
        self._task_id = task_id
        self._turn = turn
        self.taken_through = turn
        """The messageId of the last message of the task this turn took."""
        self._read: list[tuple[ContentMessage, str | None]] | None = None
        """The session as last read; an append makes it stale."""

    async def _entries(self) -> list[tuple[ContentMessage, str | None]]:
        if self._read is None:
            self._read = await patiently(lambda: self._sessions.entries(self._session))
        return self._read

    async def history(self) -> list[ContentMessage]:
        return [message for message, _ in await self._entries()]

    async def this_turn(self) -> list[ContentMessage]:
        return [message for message, turn in await self._entries() if turn == self._turn]

    async def append(self, messages: Sequence[ContentMessage]) -> None:
        self._read = None
        await patiently(
            lambda: self._sessions.append(
                self._session, messages, task_id=self._task_id, turn=self._turn
            )
        )

    def subagent(self, scope: str) -> TurnSession:
        # The unit separator cannot be in a caller's contextId (the edge refuses control
        # characters), so no conversation of a caller can name a subagent's session.
        context = SUBAGENT_SEPARATOR.join((self._session.context_id, self._task_id, scope))
        return TurnSession(
            self._sessions,
            self._tasks,
            SessionRef(self._session.caller, context),
            self._task_id,
            scope,
            takes_follow_ups=False,
        )

    async def arrivals(self) -> list[ContentMessage]:
        if not self._takes_follow_ups:
            return []
        joined = await patiently(
            lambda: self._tasks.arrivals(self._task_id, after=self.taken_through)
        )
        if not joined:
            return []
        held = {turn for _, turn in await self._entries()}  # a resumed turn took some already
        taken = []
        for message in joined:
            content = None if message.message_id in held else message_content(message)
            if content is None:
                continue
            self._read = None
            # Its own messageId marks it as taken, for a turn resumed after a crash.
            await patiently(
                functools.partial(
                    self._sessions.append,
                    self._session,
                    [content],
                    task_id=self._task_id,
                    turn=message.message_id,
                )
            )
            taken.append(content)
        self.taken_through = joined[-1].message_id
        return taken

    async def displace(
        self, displaced: Sequence[ContentMessage], replacement: Sequence[ContentMessage]
    ) -> bool:
        self._read = None
        removed = await patiently(
            lambda: self._sessions.displace(
                self._session, len(displaced), replacement, expected=displaced
            )
        )
        return bool(removed)


class TaskSubtasks:
    """The subtask store bound to one task, as the agent sees it."""

    def __init__(self, store: SubtaskStore, task_id: str) -> None:
        self._store = store
        self._task_id = task_id

    async def add(self, subtasks: Sequence[SubtaskRecord]) -> None:
        if any(s.task_id != self._task_id for s in subtasks):
            raise ValueError("a subtask of another task")
        await patiently(lambda: self._store.add(subtasks))

    async def subtasks(self) -> list[SubtaskRecord]:
        return await patiently(lambda: self._store.subtasks(self._task_id))

    async def update(self, subtask: SubtaskRecord) -> None:
        if subtask.task_id != self._task_id:
            raise ValueError("a subtask of another task")
        await patiently(lambda: self._store.update(subtask))


class TaskApprovals:
    """The approval store bound to one task, as the agent sees it (`ApprovalLog`)."""

    def __init__(self, store: ApprovalStore, task_id: str) -> None:
        self._store = store
        self._task_id = task_id

    async def ask(self, approvals: Sequence[ToolApproval]) -> None:
        await patiently(lambda: self._store.ask(self._task_id, approvals))

    async def approvals(self) -> list[ToolApproval]:
        return await patiently(lambda: self._store.approvals(self._task_id))

    async def start(self, call_id: str) -> bool:
        return await patiently(lambda: self._store.start(self._task_id, call_id))

    async def finish(self, call_id: str) -> None:
        await patiently(lambda: self._store.finish(self._task_id, call_id))
