"""One task's turns, from the store's SUBMITTED to its end: the part both runners share.

A turn begins only if its task is still SUBMITTED and ends only if it is still WORKING (guarded
writes in the store), so a cancel racing a completion ends in exactly one terminal state and
each side learns from its own write whether it won. Between the two: the tenant's turn gates,
the agent's `TurnInput` (its session, events, subtasks and tool context over the store), and
the agent's result written as the task's end, or kept for the next turn when a follow-up joined
that this turn never took.

A store out of reach (`StoreUnavailable`) is no failure of the turn: every store call of a
running turn's agent (its session, events and subtasks) and its end is tried again for
`OUTAGE_PATIENCE_SECONDS` (`patiently`), while its model calls and tools go on, so the agent
is not run again for an outage it outlived; a turn cut off by a longer one is the runner's to
take up again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs

from looping_core import _metrics, _tracing
from looping_core._logs import bind
from looping_core.a2a import (
    Artifact,
    Message,
    Part,
    Task,
    TaskState,
    agent_message,
    parts_to_blocks,
    reply_parts,
)
from looping_core.agent import Agent, TurnInput, TurnOutcome, TurnResult
from looping_core.config import RunnerConfig
from looping_core.content import ContentError, UserMessage
from looping_core.contract import Identity, SessionRef, StoreAccess, ToolContext, Turn
from looping_core.plugins import PluginHost
from looping_core.runner._adapters import (
    EarlierMessages,
    TaskApprovals,
    TaskSubtasks,
    TurnEventWriter,
    TurnSession,
)
from looping_core.runner._patience import patiently
from looping_core.runner._ports import TurnRecords
from looping_core.runner._slots import FairSlots
from looping_core.store.internal import (
    ApprovalStore,
    BegunTurn,
    JobTicket,
    SessionStore,
    StoreUnavailable,
    SubtaskStore,
    TurnEnd,
)

__all__ = ["UNSETTLED", "TurnDriver", "TurnRan"]

_log = logging.getLogger("looping_core.runner")

_ENDINGS = (TurnOutcome.COMPLETED, TurnOutcome.FAILED, TurnOutcome.REJECTED)
UNSETTLED = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
"""States of a task whose turn has not settled (ended, or asked the caller)."""


@attrs.frozen
class TurnRan:
    """What running a task's turn did."""

    began: bool
    """Whether a turn began (false: the task was not SUBMITTED)."""
    end: TurnEnd | None = None
    """What its last end wrote (none: it did not begin, a cancel stopped it, or the runner
    failed it)."""
    done: bool = True
    """False when a shutdown cut it off: it must run again (`run_or_resume`)."""


class TurnDriver:
    """Runs each tenant's agent on its tasks' turns, at most `concurrency` at a time in this
    process; the runners decide when and where."""

    def __init__(
        self,
        store: TurnRecords,
        agents: Mapping[str, Agent],
        plugins: Mapping[str, PluginHost],
        config: RunnerConfig,
        *,
        sessions: SessionStore | None = None,
        store_access: StoreAccess | None = None,
        subtasks: SubtaskStore | None = None,
        approvals: ApprovalStore | None = None,
        push_progress: bool = False,
        coalesce_seconds: float = 0.05,
    ) -> None:
        """`sessions` keeps each caller's conversation for the agents; `store_access` is what
        plugins' tools that own tables get in their `ToolContext` (calls on the store's thread).
        `approvals`: where tool calls that wait for the caller's approval are kept (without,
        such calls are never run);
        `push_progress`: a turn's progress is pushed too (`[push] progress`);
        `coalesce_seconds`: artifact chunks closer together are one event."""
        self._store = store
        self._agents = agents
        self._plugins = plugins
        self._config = config
        self._sessions = sessions
        self._store_access = store_access
        self._subtasks = subtasks
        self._approvals = approvals
        self._push_progress = push_progress
        self._coalesce_seconds = coalesce_seconds
        self._slots = FairSlots(config.concurrency)
        self._started: dict[str, float] = {}
        """When each running turn began (monotonic), for its end's log line."""

    async def reserve(self) -> bool:
        """Take a slot now if one is free and no turn waits for one (never waits): the store
        may then begin a new task's turn as it accepts it, and `run(begun=...)` runs it in this
        slot. `False`: the turn begins as usual, in its turn."""
        return self._slots.try_take()

    def release(self) -> None:
        """Give back a slot `reserve` took that no begun turn uses."""
        self._slots.release()

    async def run(
        self,
        task_id: str,
        begun: BegunTurn | None = None,
        *,
        job: JobTicket | None = None,
        owner: Identity | None = None,
    ) -> TurnRan:
        """Run the task's pending turn; what it wrote (`began` false when the task was not
        SUBMITTED: nothing began). `begun`: the store began it already, in a slot `reserve`
        took for it. `job`: the job engine's job running it, which delivers the pushes its end
        queues (the store's `end_turn`). `owner`: the caller whose turn it is, for its place in
        the round of waiting turns (`FairSlots`).

        A cancel stops it (logged, not raised); a turn the runner itself broke is failed
        (`RUNNER_ERROR`); `StoreUnavailable` is raised: the runner takes the turn up again.
        """
        ran = TurnRan(began=True)
        waiting = begun is None
        if waiting:
            _metrics.TURNS_WAITING.inc()
        try:
            async with self._slot(held=begun is not None, owner=owner):
                if waiting:
                    waiting = False
                    _metrics.TURNS_WAITING.dec()
                _metrics.TURNS_RUNNING.inc()
                try:
                    # A child of the request that accepted the turn (its context was copied).
                    with _tracing.gen_ai_span("invoke_agent", "", a2a__task_id=task_id):
                        ran = await self._begin_and_run(task_id, begun, job)
                finally:
                    _metrics.TURNS_RUNNING.dec()
        except asyncio.CancelledError:
            _log.info("turn of task %s stopped (canceled)", task_id)
        except StoreUnavailable:
            # The store logged the outage; the turn is taken up again once it is back.
            _log.warning("turn of task %s stopped: the store is unavailable", task_id)
            raise
        except Exception:
            _log.exception("turn of task %s failed in the runner", task_id)
            _metrics.TURNS.inc(outcome="failed")
            try:
                await self._store.transition(
                    task_id,
                    TaskState.TASK_STATE_FAILED,
                    allowed_from=[TaskState.TASK_STATE_WORKING],
                    status_message=agent_message((), metadata={"reason": "RUNNER_ERROR"}),
                )
            except Exception:
                _log.exception("task %s could not be failed either; it stays WORKING", task_id)
        finally:
            if waiting:
                _metrics.TURNS_WAITING.dec()
            self._started.pop(task_id, None)
        return ran

    async def run_or_resume(self, task_id: str, *, job: JobTicket | None = None) -> TurnRan:
        """Run the task's pending turn wherever it was left: a task left WORKING (its worker
        died or stopped) is resumed or failed first, as `on_restart` says. `done` is false when
        a cancel of the calling task (a shutdown) cut the turn off: it must run again. `job`:
        as for `run`."""
        current = asyncio.current_task()
        assert current is not None
        # The usual case first: a SUBMITTED task begins. Its state is looked up only when it
        # did not (an interrupted one, or nothing to run).
        ran = await self.run(task_id, job=job)
        if not ran.began:
            if await self._store.task_state(task_id) is not TaskState.TASK_STATE_WORKING:
                return ran  # ended (canceled before it ran) or waiting for input
            if not await self.recover(task_id):
                return ran
            ran = await self.run(task_id, job=job)
        if current.cancelling() and await self._store.task_state(task_id) in UNSETTLED:
            return attrs.evolve(ran, done=False)
        return ran

    async def recover(self, task_id: str) -> bool:
        """Resume (`True`: its turn is SUBMITTED again) or fail a turn a crash interrupted."""
        if self._config.on_restart == "resume":
            await self._store.transition(
                task_id,
                TaskState.TASK_STATE_SUBMITTED,
                allowed_from=[TaskState.TASK_STATE_WORKING],
            )
            _log.info("resuming task %s after a restart", task_id)
            return True
        message = agent_message(
            (Part(text=self._config.restart_message),),
            metadata={"reason": "INTERRUPTED_BY_RESTART"},
        )
        await self._store.transition(task_id, TaskState.TASK_STATE_FAILED, status_message=message)
        _log.info("failed task %s: the agent restarted while it ran", task_id)
        return False

    async def fail_lost(self, task_id: str) -> None:
        """Fail a task whose turn lost its worker too often (job engine), with the restart
        message and the reason `WORKER_LOST`."""
        message = agent_message(
            (Part(text=self._config.restart_message),), metadata={"reason": "WORKER_LOST"}
        )
        await self._store.transition(
            task_id,
            TaskState.TASK_STATE_FAILED,
            allowed_from=list(UNSETTLED),
            status_message=message,
        )

    def canceled_message(self, tenant: str) -> Message | None:
        """The status message a canceled task of `tenant` gets: its agent's words, if any."""
        agent = self._agents.get(tenant)
        words = agent.canceled_reply() if agent is not None else ()
        return agent_message(reply_parts(words)) if words else None

    @contextlib.asynccontextmanager
    async def _slot(self, *, held: bool, owner: Identity | None) -> AsyncIterator[None]:
        """One of the `concurrency` slots for the turn: waited for in `owner`'s place in the
        round, or `held` (reserved)."""
        if not held:
            await self._slots.take(owner)
        try:
            yield
        finally:
            self._slots.release()

    async def _begin_and_run(
        self, task_id: str, begun: BegunTurn | None, job: JobTicket | None
    ) -> TurnRan:
        bind(task_id=task_id)  # this turn's log lines say which task (and, below, whose)
        if begun is None:
            begun = await self._store.begin_turn(task_id)
        if begun is None:
            return TurnRan(began=False)  # canceled before it started, taken, or interrupted
        task, caller, turn_message = begun.task, begun.caller, begun.turn_message
        bind(tenant=caller.tenant, subject=caller.subject)
        # The turn's span, named once its agent is known (the tenant's); its GenAI spans are
        # of the task's conversation.
        _tracing.conversation(task.context_id)
        turn_span = _tracing.current()
        turn_span.rename(f"invoke_agent {caller.tenant}")
        turn_span.set(gen_ai__agent__name=caller.tenant, gen_ai__conversation__id=task.context_id)
        while True:
            end, following = await self._one_turn(task, caller, turn_message, job)
            if following is None:
                return TurnRan(began=True, end=end)
            # A follow-up joined the turn unseen: its output is kept, and the follow-up begins
            # the next turn of the same task.
            task, turn_message = await self._store.get(caller, task_id), following

    async def _one_turn(
        self, task: Task, caller: Identity, turn_message: str, job: JobTicket | None
    ) -> tuple[TurnEnd, str | None]:
        """Run the turn that `turn_message` began and write its end; what that wrote, and the
        messageId of the follow-up that begins the next turn when one joined that this turn
        never took."""
        task_id = task.id
        self._started[task_id] = time.monotonic()
        agent = self._agents[caller.tenant]
        at = next(i for i, m in enumerate(task.history) if m.message_id == turn_message)
        latest = task.history[at]
        try:
            blocks = parts_to_blocks(latest.parts)
        except (ContentError, ValueError) as exc:
            # The edge refuses such parts; a message stored by an earlier release may hold one.
            _log.warning("task %s: its message cannot be given to the agent: %s", task_id, exc)
            result = TurnResult(TurnOutcome.FAILED, reason="UNSUPPORTED_CONTENT")
            return await self._finish(task, result, turn_message, job)
        session = SessionRef(caller, task.context_id)
        log = (
            TurnSession(self._sessions, self._store, session, task_id, turn_message)
            if self._sessions
            else None
        )
        events = TurnEventWriter(self._store, task, self._push_progress, self._coalesce_seconds)
        turn = TurnInput(
            events=events,
            task_id=task.id,
            context_id=task.context_id,
            caller=caller,
            message=UserMessage(blocks),
            history=EarlierMessages(task.history[:at]),
            a2a_message=latest,
            session=log,
            subtasks=TaskSubtasks(self._subtasks, task_id) if self._subtasks else None,
            approvals=TaskApprovals(self._approvals, task_id) if self._approvals else None,
            tool_context=ToolContext(
                tenant=caller.tenant,
                instance_id=f"{caller.issuer}#{caller.subject}",  # a caller's tools are its own
                store=self._store_access,
            ),
        )
        gate = self._plugins[caller.tenant]
        if not await gate.should_handle_turn(turn.history, Turn(session, task.id, turn.message)):
            result = TurnResult(TurnOutcome.REJECTED, reason="TURN_GATE_DECLINED")
            return await self._finish(task, result, turn_message, job)
        try:
            result = await agent.run(turn)
        except asyncio.CancelledError:
            await asyncio.shield(_keep_canceled_metadata(agent, turn, self._store))
            raise
        except StoreUnavailable:
            raise  # not the agent's failure: the turn is taken up again
        except Exception:
            _log.exception("agent of tenant %s failed on task %s", caller.tenant, task_id)
            result = TurnResult(TurnOutcome.FAILED, reason="AGENT_ERROR")
        finally:
            await events.flush()
        return await self._finish(task, result, log.taken_through if log else turn_message, job)

    async def _finish(
        self, task: Task, result: TurnResult, taken_through: str, job: JobTicket | None
    ) -> tuple[TurnEnd, str | None]:
        """Write the turn's end, unless a follow-up joined that the turn did not take: then keep
        its output and return that follow-up's messageId too (it begins the next turn). `job`:
        the engine's job, which delivers the pushes the end queues."""
        task_id = task.id
        reply = agent_message(reply_parts(result.reply), task=task) if result.reply else None
        status_message = reply
        if result.reason is not None:
            status_message = agent_message(
                reply.parts if reply else (), metadata={"reason": result.reason}, task=task
            )
        artifacts = [
            Artifact(
                artifact_id=out.artifact_id,
                parts=reply_parts(out.blocks),
                name=out.name,
                description=out.description,
            )
            for out in result.artifacts
        ]
        write = functools.partial(
            self._store.end_turn,
            task_id,
            TaskState[result.outcome.value],
            status_message=status_message,
            reply=reply,
            artifacts=artifacts,
            metadata=result.metadata,
            taken_through=taken_through,
            answer_with_message=result.direct_message and result.outcome in _ENDINGS,
            job=job,
            spent=turn_cost(result.metadata),
            context_id=task.context_id,
        )
        # Shielded: a worker stopping for the outage must not take the agent's answer with it.
        ending = asyncio.ensure_future(patiently(write))
        ending.add_done_callback(_retrieved)  # its outage, if the turn was canceled meanwhile
        end = await asyncio.shield(ending)
        if end.won:
            _log_turn_end(task_id, result, self._started.pop(task_id, None))
            return end, None
        unseen = await self._store.arrivals(task_id, after=taken_through)
        if unseen and await self._store.next_turn(
            task_id,
            unseen[0].message_id,
            reply=reply,
            artifacts=artifacts,
            metadata=result.metadata,
            spent=turn_cost(result.metadata),
        ):
            _log.info(
                "task %s: a follow-up joined after its turn's end; it begins the next", task_id
            )
            return end, unseen[0].message_id
        _log.info("task %s was canceled while its turn ran; its result is discarded", task_id)
        return end, None


async def _keep_canceled_metadata(agent: Agent, turn: TurnInput, store: TurnRecords) -> None:
    """A turn stopped by its task's cancel: the task keeps what the agent says it had done.
    Nothing is written when the task is not CANCELED (a turn stopped by a shutdown)."""
    try:
        metadata = await agent.canceled_metadata(turn)
        if metadata:
            await store.canceled_metadata(turn.task_id, metadata)
    except StoreUnavailable:
        pass  # the store said so; the task keeps what it had
    except Exception:
        _log.exception("task %s: recording what its canceled turn had done failed", turn.task_id)


def turn_cost(report: Mapping[str, Any] | None) -> float | None:
    """What a turn's model calls cost, as its agent reports it (`looping.cost`: a number from
    0 up; anything else counts as unknown)."""
    cost = (report or {}).get("looping.cost")
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        return None
    return float(cost) if math.isfinite(cost) and cost >= 0 else None


def _retrieved(done: asyncio.Future[Any]) -> None:
    """Take a shielded write's outcome, so one nobody awaits any more is not logged as lost."""
    if not done.cancelled():
        done.exception()


def _log_turn_end(task_id: str, result: TurnResult, started: float | None) -> None:
    """Every turn's end, once: its outcome, how long it took, its rounds and tokens."""
    report = result.metadata or {}
    usage = report.get("looping.usage") or {}
    outcome = result.outcome.name.lower()
    fields: dict[str, Any] = {"outcome": outcome}
    _metrics.TURNS.inc(outcome=outcome)
    if started is not None:
        seconds = time.monotonic() - started
        fields["duration_ms"] = round(seconds * 1000, 1)
        _metrics.TURN_SECONDS.observe(seconds, outcome=outcome)
    if "looping.rounds" in report:
        fields["rounds"] = report["looping.rounds"]
    if isinstance(usage, dict) and usage:
        fields["tokens"] = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    cost = turn_cost(report)
    if cost is not None:
        fields["cost"] = round(cost, 6)
    if result.reason:
        fields["reason"] = result.reason
    words = " ".join(f"{name}={value}" for name, value in fields.items())
    _log.info("turn of task %s ended: %s", task_id, words, extra=fields)
