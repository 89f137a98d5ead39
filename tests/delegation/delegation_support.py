"""In-memory stand-ins for the runner's durable parts: a subtask log, and sessions that hand out
subagent sessions."""

from __future__ import annotations

from collections.abc import Sequence

from looping_core.content import Message
from looping_core.contract import SubtaskRecord


class Subtasks:
    """A subtask log in memory."""

    def __init__(self) -> None:
        self.rows: dict[str, SubtaskRecord] = {}
        self.updates: list[tuple[str, str]] = []

    async def add(self, subtasks: Sequence[SubtaskRecord]) -> None:
        for subtask in subtasks:
            self.rows[subtask.subtask_id] = subtask

    async def subtasks(self) -> list[SubtaskRecord]:
        return list(self.rows.values())

    async def update(self, subtask: SubtaskRecord) -> None:
        self.rows[subtask.subtask_id] = subtask
        self.updates.append((subtask.subtask_id, subtask.state))


class Sessions:
    """A parent session that hands out subagent sessions in memory, kept by scope."""

    def __init__(self) -> None:
        self.logs: dict[str, SubLog] = {}

    def subagent(self, scope: str) -> SubLog:
        return self.logs.setdefault(scope, SubLog(scope))


class SubLog:
    """A session in memory; its subagents' sessions hang off it."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.messages: list[Message] = []
        self.children: dict[str, SubLog] = {}

    async def history(self) -> list[Message]:
        return list(self.messages)

    async def this_turn(self) -> list[Message]:
        return list(self.messages)

    async def append(self, messages: Sequence[Message]) -> None:
        self.messages += messages

    async def arrivals(self) -> list[Message]:
        return []

    def subagent(self, scope: str) -> SubLog:
        return self.children.setdefault(scope, SubLog(scope))
