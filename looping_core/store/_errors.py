"""What the task store refuses, in its own words: the edge maps each to a JSON-RPC error (the
store knows no wire paths or codes)."""

from __future__ import annotations

from looping_core.errors import LoopingError

__all__ = [
    "ApprovalRefused",
    "BudgetSpent",
    "ContextMismatch",
    "GenerationMismatch",
    "InvalidPageToken",
    "PushConfigNotFound",
    "StoreRefusal",
    "TaskNotCancelable",
    "TaskNotFound",
    "TooManyTurns",
    "TurnRefused",
]


class StoreRefusal(LoopingError):
    """The store refuses a caller's request; nothing was written."""


class TaskNotFound(StoreRefusal):
    """No such task, or not the caller's: the two are indistinguishable on purpose."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id} not found")


class PushConfigNotFound(TaskNotFound):
    """The caller's task has no push config with that id."""

    def __init__(self, task_id: str, config_id: str) -> None:
        super().__init__(task_id)
        self.config_id = config_id
        self.args = (f"task {task_id} has no push config {config_id}",)


class TaskNotCancelable(StoreRefusal):
    """The task is already in a terminal state."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id} is already in a terminal state")


class TurnRefused(StoreRefusal):
    """A follow-up turn the task cannot take now (it is terminal, or still working)."""


class ApprovalRefused(StoreRefusal):
    """An answer to a task's pending tool calls that cannot be taken (unknown calls, some left
    undecided, decided already), or a message to such a task that decides nothing."""


class TooManyTurns(StoreRefusal):
    """The caller, or its tenant, has `limit` turns accepted and not yet settled already."""

    def __init__(self, scope: str, limit: int) -> None:
        self.scope = scope
        """`caller` or `tenant`: whose limit it is."""
        self.limit = limit
        super().__init__(f"the {scope} has {limit} turns waiting or running already")


class BudgetSpent(StoreRefusal):
    """The caller's turns of the day (UTC) have cost its daily budget (`limit`) already."""

    def __init__(self, limit: float, spent: float, seconds_left: int) -> None:
        self.limit = limit
        self.spent = spent
        self.seconds_left = seconds_left
        """Seconds until the day ends (UTC), when the budget is whole again."""
        super().__init__(f"the caller's turns cost {spent:g} today; its daily budget is {limit:g}")


class GenerationMismatch(StoreRefusal):
    """A follow-up's expected generation (A2A 1.1 draft `ifGenerationMatch`) is not the task's."""

    def __init__(self, task_id: str, generation: int) -> None:
        self.task_id = task_id
        self.generation = generation
        """The task's generation now."""
        super().__init__(f"task {task_id} is at generation {generation}")


class ContextMismatch(StoreRefusal):
    """A follow-up names another context than its task's."""

    def __init__(self) -> None:
        super().__init__("the message's contextId does not match the task's context")


class InvalidPageToken(StoreRefusal):
    """A page token this store did not issue."""

    def __init__(self) -> None:
        super().__init__("not a page token this server issued")
