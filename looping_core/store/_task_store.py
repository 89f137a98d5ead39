"""`TaskStore`: the task store's parts in one object, as the runner, the deliverer and the edge
use it."""

from __future__ import annotations

from looping_core.store._reads import Reads
from looping_core.store._turns import Turns

__all__ = ["TaskStore"]


class TaskStore(Turns, Reads):
    """Async task storage; every call runs on the database's own thread.

    Every method is scoped to the verified caller (tenant, issuer, subject) wherever a caller is
    involved: anyone else's task is `TaskNotFound`, never "forbidden". Its parts: accepting turns
    (`_turn_starts`), state changes (`_turns`), reads (`_reads`), push configs
    (`_push_configs`), the outbox (`_outbox`); `adopt_orphans` and `adopt_node` (`_owners`)
    hand over rows between owners.
    """
