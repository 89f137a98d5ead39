"""`TaskStore`: the task store's parts composed into one object, as the edge, the runners and
the deliverer use it. Each part is its own object over the same database: the outbox
(`_outbox`), the events (`_events`, which queue a pushed progress in the outbox), the push
configs (`_push_configs`), the turns (`_turn_starts`, `_turns`: accepting and changing a task,
writing its events and pushes through those parts), and the reads (`_reads`). Each of the
store's methods below is one part's; the runners take what they need of them as protocols of
their own (`looping_core.runner._ports`).
"""

from __future__ import annotations

from typing import TypedDict

from looping_core.store._db import Database
from looping_core.store._events import Events
from looping_core.store._jobs import JobHooks
from looping_core.store._outbox import Outbox
from looping_core.store._push_configs import PushConfigs
from looping_core.store._reads import Reads
from looping_core.store._secrets import PushSecrets
from looping_core.store._turns import Turns

__all__ = ["TaskStore"]


class _PartOptions(TypedDict):
    """Whose rows the parts write, and what they tell: the same for every part."""

    node: str
    worker: int
    jobs: JobHooks | None
    secrets: PushSecrets | None


class TaskStore:
    """Async task storage; every call runs on the database's own thread.

    Every method is scoped to the verified caller (tenant, issuer, subject) wherever a caller is
    involved: anyone else's task is `TaskNotFound`, never "forbidden". `adopt_orphans` and
    `adopt_node` (`_owners`) hand over rows between owners.
    """

    def __init__(
        self,
        database: Database,
        *,
        node: str = "",
        worker: int = 0,
        jobs: JobHooks | None = None,
        secrets: PushSecrets | None = None,
    ) -> None:
        """Every part gets the same owner (`node`, `worker`), job engine (`jobs`) and push
        secrets (`secrets`), as `StoreBase` describes them."""
        owner = _PartOptions(node=node, worker=worker, jobs=jobs, secrets=secrets)
        self.outbox = outbox = Outbox(database, **owner)
        self.events = events = Events(database, outbox=outbox, **owner)
        self.push_configs = configs = PushConfigs(database, **owner)
        self.turns = turns = Turns(
            database, events=events, push_configs=configs, outbox=outbox, **owner
        )
        self.reads = reads = Reads(database, **owner)
        # Accepting and changing tasks.
        self.start_turn = turns.start_turn
        self.begin_turn = turns.begin_turn
        self.end_turn = turns.end_turn
        self.transition = turns.transition
        self.next_turn = turns.next_turn
        self.arrivals = turns.arrivals
        self.cancel = turns.cancel
        self.answer = turns.answer
        self.canceled_metadata = turns.canceled_metadata
        # Events, and what tells this process about them.
        self.watch_events = events.watch_events
        self.event_notices = events.event_notices
        self.events_since = events.events_since
        self.events_after = events.events_after
        self.stream_start = events.stream_start
        self.latest_event = events.latest_event
        self.progress = events.progress
        self.artifact_update = events.artifact_update
        # Push configs.
        self.put_push_config = configs.put_push_config
        self.get_push_config = configs.get_push_config
        self.list_push_configs = configs.list_push_configs
        self.delete_push_config = configs.delete_push_config
        # The outbox.
        self.watch_pushes = outbox.watch_pushes
        self.due_pushes = outbox.due_pushes
        self.untried_pushes = outbox.untried_pushes
        self.pending_push = outbox.pending_push
        self.pending_pushes = outbox.pending_pushes
        self.record_attempt = outbox.record_attempt
        self.outbox_rows = outbox.outbox
        # Reads.
        self.unready = reads.unready
        self.get = reads.get
        self.list_tasks = reads.list_tasks
        self.task_state = reads.task_state
        self.unfinished = reads.unfinished
        self.ended_among = reads.ended_among
