"""What the edge asks of a runner, whichever runs the turns: this process (`LocalRunner`) or
a job engine's workers anywhere (`EngineRunner`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from looping_core.a2a import Message
from looping_core.contract import Identity
from looping_core.store.internal import TurnStart

__all__ = ["Runner"]


class Runner(Protocol):
    """Starts accepted turns, waits for them to settle, and stops canceled ones. Each runner
    is assembled by its own `assemble` (what it needs differs: slots and a recovery pass here,
    a job engine and its listener there)."""

    async def accept(
        self, begin: Callable[[bool], Awaitable[TurnStart]], caller: Identity, *, new_task: bool
    ) -> TurnStart:
        """Accept a message and start what it began: `begin(now)` writes it (the store's
        `start_turn`), with `now` true when the store is to begin a new task's turn in the same
        transaction (one write instead of two), in a slot the runner holds for it. The runner
        decides that (`new_task`: the message begins a task), and runs or hands on whatever
        turn the write began or queued; `caller`'s place among waiting turns is kept by tenant
        and caller."""

    async def wait_settled(self, task_id: str, timeout: float) -> None:
        """Return when the task's turn has ended or asked for input, or after `timeout` s."""

    async def cancel(self, task_id: str) -> None:
        """Stop the task's turn wherever it runs (its task was just canceled in the store)."""

    def canceled_message(self, tenant: str) -> Message | None:
        """The status message a canceled task of `tenant` gets: its agent's words, if any."""

    @property
    def running(self) -> bool:
        """Whether it runs (readiness): opened and not closed, its watchers alive."""

    async def open(self) -> None:
        """Take up what a crash left (where that is this runner's business) and start
        watching; called once before the server listens."""

    async def close(self) -> None:
        """Stop watching and stop this process's turns (they are taken up again later)."""
