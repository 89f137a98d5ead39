"""A session and an approval log in memory: the agent seam's `SessionLog` and `ApprovalLog`,
for driving a loop or an agent with no store."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from looping_core.content import Message, ToolApproval

__all__ = ["MemoryApprovals", "MemorySession"]


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


class MemoryApprovals:
    """An `ApprovalLog` in memory (`TurnInput.approvals`): the calls a turn asked the caller
    about, by call id. `decide` is the caller's answer (the edge writes it in a server); `start`
    is won once per approved call, as the store's guarded write is."""

    def __init__(self) -> None:
        self.rows: dict[str, ToolApproval] = {}

    async def ask(self, approvals: Sequence[ToolApproval]) -> None:
        for approval in approvals:
            self.rows.setdefault(approval.call_id, approval)

    async def approvals(self) -> list[ToolApproval]:
        return list(self.rows.values())

    def decide(self, call_id: str, approve: bool, reason: str = "") -> None:
        """Approve or deny a pending call, as the caller's answer does."""
        state = "approved" if approve else "denied"
        self.rows[call_id] = attrs.evolve(self.rows[call_id], state=state, reason=reason)

    async def start(self, call_id: str) -> bool:
        row = self.rows[call_id]
        if row.state != "approved":
            return False
        self.rows[call_id] = attrs.evolve(row, state="started")
        return True

    async def finish(self, call_id: str) -> None:
        row = self.rows[call_id]
        if row.state in ("started", "denied") and not row.ended:
            state = "done" if row.state == "started" else row.state
            self.rows[call_id] = attrs.evolve(row, state=state, ended=True)
