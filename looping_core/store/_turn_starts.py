"""Accepting a turn: a user message taken exactly once per (caller, messageId), as a new task
or a follow-up to an interrupted one, in one transaction with its push config and (when a runner
holds a slot) the turn's begin. A duplicate returns the first task and starts nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import attrs
import peewee

from looping_core.a2a import (
    Message,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from looping_core.content import Decision
from looping_core.contract import Identity
from looping_core.store._approvals import decide_approvals
from looping_core.store._errors import (
    BudgetSpent,
    ContextMismatch,
    GenerationMismatch,
    TooManyTurns,
    TurnRefused,
)
from looping_core.store._events import Events
from looping_core.store._one_statement import (
    MESSAGE_IS_NEW,
    NEW_TASK,
    UNSETTLED,
    accept_at_once,
    unsettled_arguments,
)
from looping_core.store._outbox import Outbox
from looping_core.store._push_configs import PushConfigs
from looping_core.store._rows import (
    DAY_US,
    RUNNING,
    RUNNING_SQL,
    Head,
    StoreBase,
    dump,
    new_id,
    now_us,
    timestamp,
)

__all__ = ["BegunTurn", "TurnLimits", "TurnStart", "TurnStarts"]

_ASKING = TaskState.TASK_STATE_INPUT_REQUIRED.value
"""The state of a task whose calls may wait for the caller's decisions."""
_JOIN_TURN = (
    "UPDATE tasks SET joined_seq = (SELECT seq FROM messages WHERE task_id = ? AND message_id = ?)"
    f" WHERE id = ? AND state IN ({RUNNING_SQL})"
)
"""A follow-up joins the task's running turn: the task's row says so (`TaskRow.joined_seq`),
if the task still runs a turn."""


STEADY_READS = 3
"""How many times a resent message's task is read until its generation holds still around it."""


class _TurnEndedMeanwhile(Exception):
    """The turn a follow-up was to join ended after the task was read (PostgreSQL: another
    process's end committed in between): the accept is undone and tried again."""


_SPENT_TODAY = (
    "SELECT cost FROM caller_spend WHERE tenant = ? AND issuer = ? AND subject = ? AND day = ?"
)
"""What a caller's turns have cost on a day (`DAY_US`: UTC days since the epoch)."""


@attrs.frozen
class TurnLimits:
    """How many turns may be accepted and not yet settled (SUBMITTED or WORKING) at once: per
    caller and per tenant (0: no limit), and what a caller's turns may cost per day.

    `fair`: for the job engine's order, how many of the tenant's unsettled turns to count when
    no tenant limit counts them (0: none). A turn's job priority is minus its tenant's count,
    so the engine fetches one tenant's turns between another's instead of after them all. Past
    the bound a tenant's turns all take its last priority, and the count, which reads one index
    entry and its row per turn counted, costs the same whatever the backlog."""

    caller: int = 0
    tenant: int = 0
    fair: int = 0
    caller_daily_cost: float = 0.0
    """What one caller's turns may cost per day (UTC) before its next turn is refused
    (`BudgetSpent`); 0: no budget."""

    @property
    def counted(self) -> tuple[int, int]:
        """How many of the tenant's and of the caller's unsettled turns an accept counts at most
        (0: none): each one's limit, or for the fair order alone its bound."""
        return self.tenant or self.fair, self.caller


@attrs.frozen
class BegunTurn:
    """A turn the runner began: the task, its owner, and the messageId that began the turn."""

    task: Task
    caller: Identity
    turn_message: str


@attrs.frozen
class TurnStart:
    """What `start_turn` did: the task, and whether this call began a turn or joined one."""

    task: Task
    started: bool
    joined: bool = False
    """The message joined the turn the task is running (the runner takes it from there)."""
    begun: BegunTurn | None = None
    """The turn, begun in the same transaction (`start_turn(begin=True)`, a new task)."""
    generation: int = 1
    """The task's generation as `task` shows it (A2A 1.1 draft): 1 for a new task; read only
    when asked for (`start_turn(generations=True)`), else 0 for any other."""


class TurnStarts(StoreBase):
    """Accepting a user message exactly once: a new task, or a follow-up to one. Its events are
    written by `events`, its push config by `push_configs`, in the same write."""

    def __init__(
        self, *args: Any, events: Events, push_configs: PushConfigs, outbox: Outbox, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._events = events
        self._push_configs = push_configs
        self._outbox = outbox

    async def start_turn(
        self,
        caller: Identity,
        message: Message,
        push: TaskPushNotificationConfig | None,
        *,
        begin: bool = False,
        limits: TurnLimits = TurnLimits(),
        decisions: Sequence[Decision] | None = None,
        generations: bool = False,
        if_generation: int | None = None,
    ) -> TurnStart:
        """Accept a user message exactly once per (caller, messageId): a new task, or a follow-up
        to an interrupted one. A duplicate returns the first task and starts nothing.

        `generations`: read the task's generation for `TurnStart.generation` (the A2A 1.1
        draft). `if_generation`: a follow-up is refused (`GenerationMismatch`, nothing written)
        unless the task is at that generation; a duplicate returns its task all the same (a
        retried send stays idempotent), and a new task ignores it.

        `begin`: a runner holds a slot for it, so a new task's turn begins in the same
        transaction (`TurnStart.begun`; no `begin_turn` then). The task returned is still the
        one accepted (SUBMITTED), and its events are the same: WORKING is its first.
        `limits`: a turn past them raises `TooManyTurns` and writes nothing (a duplicate still
        returns its task). Counted in the transaction, so on PostgreSQL accepts racing each
        other may pass a limit by as many as race. `decisions`: the message's decisions on the
        task's tool calls that wait for approval, written with it (`ApprovalRefused`, nothing
        written, when they do not decide exactly the pending calls, or when calls are pending
        and the message decides none)."""
        accept = functools.partial(
            self._start_turn, caller, message, push, begin=begin, limits=limits,
            decisions=decisions, generations=generations, if_generation=if_generation,
        )  # fmt: skip
        run = self._db.run
        if self._one_statement_writes and not (begin or message.task_id):
            alone = self._accepts_alone
            accept = functools.partial(
                self._accept_at_once, caller, message, push, limits=limits,
                generations=generations, alone=alone,
            )  # fmt: skip
            run = self._db.run_alone if alone else self._db.run
        try:
            start = await run(accept)
        except peewee.IntegrityError:
            # Another connection (PostgreSQL, or another server process) committed the same
            # messageId first; this transaction was rolled back, and the retry finds that turn.
            start = await run(accept)
        except _TurnEndedMeanwhile:
            # The retry reads the task as its turn's end left it: a follow-up then continues
            # an interrupted task, or is refused by a terminal one (nothing was written).
            start = await run(accept)
        if start.begun is not None or (start.started and message.task_id):
            self._events.events_written(
                start.task.id
            )  # the turn's WORKING, the follow-up's SUBMITTED
        return start

    def _start_turn(
        self,
        caller: Identity,
        message: Message,
        push: TaskPushNotificationConfig | None,
        *,
        begin: bool,
        limits: TurnLimits,
        decisions: Sequence[Decision] | None,
        generations: bool,
        if_generation: int | None,
    ) -> TurnStart:
        scope = (caller.tenant, caller.issuer, caller.subject)
        with self._db.write():
            stamp = now_us()
            joined = False
            if message.task_id:
                duplicate = self._first_turn_of(scope, message.message_id, generations)
                if duplicate is not None:
                    return duplicate
                head = self._owned(caller, message.task_id)
                if if_generation is not None:
                    generation = self._generation(head.id)
                    if generation != if_generation:
                        raise GenerationMismatch(head.id, generation)
                self._check_follow_up(message, head)
                if decisions is not None or head.state == _ASKING:  # only such a task asks
                    decide_approvals(self._sql, head.id, decisions, stamp)
                joined = head.state in RUNNING
                if not joined:
                    priority = self._within(limits, scope, stamp)
                    self._begin_next_turn(head, message.message_id, stamp)
                    self._queue_turn(head.id, priority)
                task_id, context_id = head.id, head.context_id
            else:
                try:
                    priority = self._within(limits, scope, stamp)
                except (TooManyTurns, BudgetSpent) as refused:
                    return self._duplicate_or(refused, scope, message.message_id, generations)
                task_id = new_id()
                context_id = message.context_id or new_id()
                state = TaskState.TASK_STATE_WORKING if begin else TaskState.TASK_STATE_SUBMITTED
                # The new task is written only if the message is new: the duplicate check and
                # the write are one statement (the unique index on messages still decides a
                # race between two connections: IntegrityError, and `start_turn` tries again).
                inserted = self._sql(
                    f"{NEW_TASK} WHERE {MESSAGE_IS_NEW}",
                    (
                        task_id,
                        *scope,
                        context_id,
                        state.value,
                        stamp,
                        stamp,
                        self._node,
                        self._worker,
                        message.message_id,
                        1 if begin else 0,
                        *scope,
                        message.message_id,
                    ),
                ).rowcount
                if inserted != 1:
                    duplicate = self._first_turn_of(scope, message.message_id, generations)
                    if duplicate is None:  # its task was pruned in between: as after a race
                        raise peewee.IntegrityError("the message's task is gone; try again")
                    return duplicate
                if not begin:
                    self._queue_turn(task_id, priority, new_task=True)
            stored = attrs.evolve(message, task_id=task_id, context_id=context_id)
            self._sql(
                "INSERT INTO messages (task_id, tenant, issuer, subject, message_id, body, joined)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (task_id, *scope, message.message_id, dump(stored), joined),
            )
            if (
                joined
                and self._sql(_JOIN_TURN, (task_id, message.message_id, task_id)).rowcount != 1
            ):
                raise _TurnEndedMeanwhile(task_id)
            if push is not None:
                # An inline config without an id takes the task's id (as the official SDK does),
                # so the config a gateway re-sends with every turn replaces itself.
                self._push_configs.write_push_config(
                    task_id, attrs.evolve(push, id=push.id or task_id)
                )
            if message.task_id:
                generation = self._generation(task_id) if generations else 0  # read first
                snapshot = self._snapshot(task_id, None, include_artifacts=True)
                return TurnStart(snapshot, started=not joined, joined=joined, generation=generation)
            status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=timestamp(stamp))
            task = Task(id=task_id, context_id=context_id, status=status, history=(stored,))
            if not begin:
                return TurnStart(task, True)
            working = self._working_event(task_id, context_id, 1, stamp)
            begun = BegunTurn(attrs.evolve(task, status=working), caller, message.message_id)
            return TurnStart(task, True, begun=begun)

    def _accept_at_once(
        self,
        caller: Identity,
        message: Message,
        push: TaskPushNotificationConfig | None,
        *,
        limits: TurnLimits,
        generations: bool,
        alone: bool,
    ) -> TurnStart:
        """PostgreSQL, a new task with no slot held: `_start_turn`'s new task, with its limits'
        count, its message, its push config and its job's defer in one statement
        (`accept_at_once`), its own transaction (`alone`, `_accepts_alone`); else the defer
        follows it in one transaction. The same outcomes: a duplicate returns its task (even
        past a limit); a turn past a limit is refused, and nothing is written."""
        scope = (caller.tenant, caller.issuer, caller.subject)
        with contextlib.nullcontext() if alone else self._db.write():
            stamp = now_us()
            try:
                self._within_budget(limits, scope, stamp)
            except BudgetSpent as refused:
                return self._duplicate_or(refused, scope, message.message_id, generations)
            task_id = new_id()
            context_id = message.context_id or new_id()
            stored = attrs.evolve(message, task_id=task_id, context_id=context_id)
            config = None
            if push is not None:  # without an id it takes the task's (see `_start_turn`)
                pushed = attrs.evolve(push, id=push.id or task_id)
                config = self._push_configs.push_config_row(task_id, pushed)[1]
            submitted = TaskState.TASK_STATE_SUBMITTED
            task_row = (
                task_id, *scope, context_id, submitted.value, stamp, stamp, self._node,
                self._worker, message.message_id, 0,
            )  # fmt: skip
            message_row = (task_id, *scope, message.message_id, dump(stored), False)
            defer = self._new_turn_call(task_id) if alone else None
            statement = accept_at_once(
                task_row, message_row, config, counted=limits.counted, caller_limit=limits.caller,
                tenant_limit=limits.tenant, defer=defer,
            )  # fmt: skip
            tenant_turns, caller_turns, written, _deferred = self._sql(*statement).fetchone()
            if not written:  # a duplicate, a turn past a limit, or a task pruned meanwhile
                duplicate = self._first_turn_of(scope, message.message_id, generations)
                if duplicate is not None:
                    return duplicate
                _check_turns(limits, tenant_turns, caller_turns)
                # Its message's task was pruned in between: as after a race, tried again.
                raise peewee.IntegrityError("the message's task is gone; try again")
            if not alone:
                self._queue_turn(task_id, -int(tenant_turns), new_task=True)
            status = TaskStatus(state=submitted, timestamp=timestamp(stamp))
            task = Task(id=task_id, context_id=context_id, status=status, history=(stored,))
            return TurnStart(task, True)

    def _duplicate_or(
        self, refused: Exception, scope: tuple[str, str, str], message_id: str, generations: bool
    ) -> TurnStart:
        """A refused turn's message may be a duplicate: then it returns its first task, as a
        retried send must; else `refused` is raised."""
        duplicate = self._first_turn_of(scope, message_id, generations)
        if duplicate is None:
            raise refused
        return duplicate

    def _within(self, limits: TurnLimits, scope: tuple[str, str, str], stamp: int) -> int:
        """Check that one more turn is within `limits` (`BudgetSpent`, `TooManyTurns` if not);
        its job's priority: minus the tenant's unsettled turns."""
        self._within_budget(limits, scope, stamp)
        if not any(limits.counted):
            return 0
        counted = unsettled_arguments(scope, *limits.counted)
        tenant_turns, caller_turns = self._sql(UNSETTLED, counted).fetchone()
        _check_turns(limits, tenant_turns, caller_turns)
        return -int(tenant_turns)

    def _within_budget(self, limits: TurnLimits, scope: tuple[str, str, str], stamp: int) -> None:
        """`BudgetSpent` if the caller's turns spent its daily budget."""
        if limits.caller_daily_cost > 0:
            day, into_day = divmod(stamp, DAY_US)
            row = self._sql(_SPENT_TODAY, (*scope, day)).fetchone()
            spent = float(row[0]) if row is not None else 0.0
            if spent >= limits.caller_daily_cost:
                seconds_left = max(1, -(-(DAY_US - into_day) // 1_000_000))
                raise BudgetSpent(limits.caller_daily_cost, spent, seconds_left)

    def _first_turn_of(
        self, scope: tuple[str, str, str], message_id: str, generations: bool = False
    ) -> TurnStart | None:
        """The task a message already started or joined (a duplicate starts nothing), or `None`
        for a message never seen; with `generations`, its generation too."""
        row = self._sql(
            "SELECT task_id FROM messages"
            " WHERE tenant = ? AND issuer = ? AND subject = ? AND message_id = ?",
            (*scope, message_id),
        ).fetchone()
        if row is None:
            return None
        task_id = row[0]
        if not generations:
            return TurnStart(self._snapshot(task_id, None, include_artifacts=True), False)
        # The generation is read again after the task, and both again if a change came in
        # between: on PostgreSQL this runs statement by statement (READ COMMITTED, or no
        # transaction at all), and each statement sees what committed before it.
        generation = self._generation(task_id)
        for _ in range(STEADY_READS):
            before = generation
            task = self._snapshot(task_id, None, include_artifacts=True)
            generation = self._generation(task_id)
            if generation == before:
                break
        else:
            generation = before  # changing all along: never newer than the task read last
        return TurnStart(task, False, generation=generation)

    def _generation(self, task_id: str) -> int:
        """The task's generation (A2A 1.1 draft): 1 when created, one more per event since."""
        (seq,) = self._sql("SELECT event_seq FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return int(seq) + 1

    def _working_event(self, task_id: str, context_id: str, seq: int, stamp: int) -> TaskStatus:
        """Write the WORKING event a turn's begin reports, as event `seq` (the number the
        begin's own write took); returns the status."""
        working = TaskStatus(TaskState.TASK_STATE_WORKING, timestamp=timestamp(stamp))
        update = TaskStatusUpdateEvent(task_id, context_id, working)
        self._events.insert_events(task_id, seq, [StreamResponse(status_update=update)], stamp)
        return working

    def _begin_next_turn(self, head: Head, message_id: str, stamp: int) -> None:
        """An interrupted task's follow-up begins its next turn (SUBMITTED, on this server)."""
        updated = self._sql(
            "UPDATE tasks SET state = ?, status_message = NULL, status_ts = ?, node = ?,"
            " worker = ?, turn_message = ? WHERE id = ? AND state = ?",
            (
                TaskState.TASK_STATE_SUBMITTED.value,
                stamp,
                self._node,
                self._worker,
                message_id,
                head.id,
                head.state,
            ),
        ).rowcount
        if updated != 1:
            raise TurnRefused("The task changed state; fetch it and try again")
        self._events.status_event(head.id, TaskState.TASK_STATE_SUBMITTED, None, stamp)

    @staticmethod
    def _check_follow_up(message: Message, head: Head) -> None:
        """A follow-up continues an interrupted task, or joins the turn of a running one; a
        terminal task takes none."""
        if message.context_id and message.context_id != head.context_id:
            raise ContextMismatch()
        if TaskState(head.state).is_terminal:
            raise TurnRefused(
                "The task is in a terminal state; start a new task in the same context"
            )


def _check_turns(limits: TurnLimits, tenant_turns: int, caller_turns: int) -> None:
    """`TooManyTurns` if one more turn would pass the caller's limit, then the tenant's."""
    if limits.caller and caller_turns >= limits.caller:
        raise TooManyTurns("caller", limits.caller)
    if limits.tenant and tenant_turns >= limits.tenant:
        raise TooManyTurns("tenant", limits.tenant)
