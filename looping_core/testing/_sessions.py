"""A session in memory: the agent seam's `SessionLog`, for driving a loop with no store."""

from __future__ import annotations

from collections.abc import Sequence

from looping_core.content import Message

__all__ = ["MemorySession"]


class MemorySession:
    """A `SessionLog` in memory: messages with the turn that added them. Put follow-ups in
    `inbox` to have the running loop take them; `subagent(scope)` hands out sessions of its
    own, kept in `subagents`."""

    def __init__(self, turn: str = "turn-1", messages: Sequence[Message] = ()) -> None:
        self.turn = turn
        self.entries: list[tuple[Message, str]] = [(m, "earlier") for m in messages]
        self.inbox: list[Message] = []
        self.subagents: dict[str, MemorySession] = {}
        self.displaced: list[list[Message]] = []

    @property
    def messages(self) -> list[Message]:
        return [message for message, _ in self.entries]

    async def history(self) -> list[Message]:
        return self.messages

    async def this_turn(self) -> list[Message]:
        return [message for message, turn in self.entries if turn == self.turn]

    async def append(self, messages: Sequence[Message]) -> None:
        self.entries += [(message, self.turn) for message in messages]

    async def arrivals(self) -> list[Message]:
        taken, self.inbox = self.inbox, []
        self.entries += [(message, "follow-up") for message in taken]
        return taken

    def subagent(self, scope: str) -> MemorySession:
        return self.subagents.setdefault(scope, MemorySession(scope))

    async def displace(self, displaced: Sequence[Message], replacement: Sequence[Message]) -> bool:
        if self.messages[: len(displaced)] != list(displaced):
            return False
        self.entries[: len(displaced)] = [(message, "summary") for message in replacement]
        self.displaced.append(list(displaced))
        return True
