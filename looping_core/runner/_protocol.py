"""What the edge asks of a runner, whichever runs the turns: this process (`LocalRunner`) or
a job engine's workers anywhere (`EngineRunner`)."""

from __future__ import annotations

from typing import Protocol

from looping_core.a2a import Message
from looping_core.contract import Identity
from looping_core.store.internal import BegunTurn

__all__ = ["Runner"]


class Runner(Protocol):
    """Starts accepted turns, waits for them to settle, and stops canceled ones."""

    def start(self, task_id: str, owner: Identity | None = None) -> None:
        """Run the task's pending turn (idempotent while it is pending or running). `owner`:
        the caller whose turn it is, so that turns waiting for a slot take turns by tenant
        and caller."""

    async def reserve(self) -> bool:
        """Hold a slot, if one is free now, for a turn the store begins as it accepts the task
        (`TaskStore.start_turn(begin=True)`): one transaction instead of two. `True`: hand the
        begun turn to `start_begun`, or give the slot back with `release` (a duplicate, a
        follow-up, a refusal). A runner whose turns run elsewhere holds none."""

    def release(self) -> None:
        """Give back the slot `reserve` held, unused."""

    def start_begun(self, begun: BegunTurn) -> None:
        """Run a turn the store began as it accepted its task, in the slot `reserve` held."""

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
