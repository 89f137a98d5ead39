"""The embedded runner: turns run in this process, `SUBMITTED → WORKING →` terminal.

Every state change is a guarded write in the store: a turn starts only if its task is still
SUBMITTED, and ends only if it is still WORKING, so a cancel racing a completion ends in exactly
one terminal state and each side learns from its own write whether it won. On startup, turns a
crash left SUBMITTED or WORKING are resumed or failed, as `[runner] on_restart` says.

A store out of reach (`StoreUnavailable`) is no failure of the turn: a turn whose agent has
answered keeps trying to write its end for `END_WRITE_PATIENCE_SECONDS` (the agent is not run
again for an outage it outlived); a turn cut off before that is taken up when the store is back
(the job engine runs its job again; embedded, this runner looks until the store answers) and,
found WORKING, resumed or failed as `on_restart` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from looping_core import _metrics, _tracing
from looping_core._logs import bind
from looping_core.a2a import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    block_to_part,
    parts_to_blocks,
)
from looping_core.agent import Agent, ArtifactOut, TurnInput, TurnOutcome, TurnResult
from looping_core.config import RunnerConfig
from looping_core.content import (
    AssistantMessage,
    AudioBlock,
    Block,
    ContentError,
    ImageBlock,
    RefusalBlock,
    TextBlock,
    UserMessage,
)
from looping_core.content import Message as ContentMessage
from looping_core.contract import (
    Identity,
    SessionRef,
    StoreAccess,
    SubtaskRecord,
    ToolContext,
    Turn,
)
from looping_core.plugins import PluginHost
from looping_core.store import SessionStore, StoreUnavailable, SubtaskStore, TaskStore

__all__ = ["EmbeddedRunner"]

_log = logging.getLogger("looping_core.runner")

REFUSAL_METADATA = "looping.refusal"
SUBAGENT_SEPARATOR = "\x1f"
"""Joins a conversation, a task and a scope into a subagent session's context."""
CANCEL_POLL_SECONDS = 1.0
END_WRITE_PATIENCE_SECONDS = 60.0
"""How long a turn whose agent answered keeps trying to write its end while the store is out
of reach, before the turn is given up here (and taken up again when the store is back)."""
OUTAGE_RETRY_FIRST, OUTAGE_RETRY_MAX = 0.2, 1.0
"""Pauses between tries while the store is out of reach: short, so a restarted store is
noticed within a second."""
_ENDINGS = (TurnOutcome.COMPLETED, TurnOutcome.FAILED, TurnOutcome.REJECTED)
_UNSETTLED = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)


class EmbeddedRunner:
    """Runs each tenant's agent on its turns, at most `concurrency` at a time."""

    def __init__(
        self,
        store: TaskStore,
        agents: Mapping[str, Agent],
        plugins: Mapping[str, PluginHost],
        config: RunnerConfig,
        *,
        on_settled: Callable[[], None] = lambda: None,
        sessions: SessionStore | None = None,
        store_access: StoreAccess | None = None,
        subtasks: SubtaskStore | None = None,
        push_progress: bool = False,
        coalesce_seconds: float = 0.05,
        queued: bool = False,
    ) -> None:
        """`sessions` keeps each caller's conversation for the agents; `store_access` is what
        plugins' tools that own tables get in their `ToolContext` (calls on the store's thread).
        `push_progress`: a turn's progress is pushed too (`[push] progress`);
        `coalesce_seconds`: artifact chunks closer together are one event. `queued`: a job
        engine runs the turns (`run_queued`, on whichever process takes the job), so `start`,
        `recover` and watching for cancellations are the engine's business."""
        self._queued = queued
        self._open = False
        self._push_progress = push_progress
        self._coalesce_seconds = coalesce_seconds
        self._sessions = sessions
        self._store_access = store_access
        self._subtasks = subtasks
        self._store = store
        self._agents = agents
        self._plugins = plugins
        self._config = config
        self._slots = asyncio.Semaphore(config.concurrency)
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._settled: dict[str, asyncio.Event] = {}
        self._on_settled = on_settled
        self._watcher: asyncio.Task[None] | None = None
        self._started: dict[str, float] = {}
        """When each running turn began (monotonic), for its end's log line."""

    def start(self, task_id: str) -> None:
        """Schedule the task's pending turn (idempotent while it is scheduled). With a job
        engine, nothing: the store deferred its job with the task."""
        if task_id in self._running or self._queued:
            return
        job = asyncio.create_task(self._run(task_id), name=f"looping-turn-{task_id}")
        self._running[task_id] = job
        job.add_done_callback(functools.partial(self._forget, task_id))  # canceled before it ran

    async def wait_settled(self, task_id: str, timeout: float) -> None:
        """Wait (at most `timeout` s) until the task's turn ends or asks for input.

        Returns at once when no turn of the task runs here: it has settled already, or another
        server process runs it (a duplicate that reached another worker).
        """
        if task_id not in self._running:
            if self._queued:
                await self._wait_in_store(task_id, timeout)
            return
        event = self._settled.setdefault(task_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

    async def _wait_in_store(self, task_id: str, timeout: float) -> None:
        """Wait for a turn some worker runs, anywhere: its task's state, looked at less and less
        often (from 10 ms to 200 ms) until it settles or `timeout` passes."""
        delay = 0.01
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while await self._store.task_state(task_id) in _UNSETTLED:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.2)

    async def run_queued(self, task_id: str) -> bool:
        """Run the task's pending turn as the job engine's job. A task left WORKING (its worker
        died or stopped) is resumed or failed first, as `on_restart` says. Returns `False` when
        this process's shutdown cut the turn off: the job must run again."""
        job = asyncio.current_task()
        assert job is not None
        self._running[task_id] = job
        # The usual case first: a SUBMITTED task begins. Its state is looked up only when it
        # did not (an interrupted one, or nothing to run).
        if not await self._run(task_id):
            if await self._store.task_state(task_id) is not TaskState.TASK_STATE_WORKING:
                return True  # ended (canceled before it ran) or waiting for input
            if not await self._recover(task_id):
                return True
            self._running[task_id] = job
            await self._run(task_id)
        return not job.cancelling() or await self._store.task_state(task_id) not in _UNSETTLED

    async def fail_lost(self, task_id: str) -> None:
        """Fail a task whose turn lost its worker too often (job engine), with the restart
        message and the reason `WORKER_LOST`."""
        message = _agent_message(
            (Part(text=self._config.restart_message),), metadata={"reason": "WORKER_LOST"}
        )
        await self._store.transition(
            task_id,
            TaskState.TASK_STATE_FAILED,
            allowed_from=list(_UNSETTLED),
            status_message=message,
        )

    def canceled_message(self, tenant: str) -> Message | None:
        """The status message a canceled task of `tenant` gets: its agent's words, if any."""
        agent = self._agents.get(tenant)
        words = agent.canceled_reply() if agent is not None else ()
        return _agent_message(_parts(words)) if words else None

    def cancel_local(self, task_id: str) -> None:
        """Stop a turn running here (its task was canceled)."""
        job = self._running.get(task_id)
        if job is not None:
            job.cancel()
            _metrics.TURNS.inc(outcome="canceled")
        self._settle(task_id)

    async def recover(self) -> None:
        """Deal with turns a crash left SUBMITTED or WORKING: resume or fail them.

        A task whose recovery fails is logged and left as it is: one bad row must never keep
        the server from starting, nor the other tasks from being recovered.
        """
        if self._queued:
            return  # the engine runs dead workers' jobs again
        for task_id in await self._store.unfinished():
            try:
                if await self._recover(task_id):
                    self.start(task_id)
            except Exception:
                _log.exception("recovering task %s failed; it is left as it is", task_id)
        self._on_settled()

    async def _recover(self, task_id: str) -> bool:
        """Resume (`True`: its turn is SUBMITTED again) or fail a turn a crash interrupted."""
        if self._config.on_restart == "resume":
            await self._store.transition(
                task_id,
                TaskState.TASK_STATE_SUBMITTED,
                allowed_from=[TaskState.TASK_STATE_WORKING],
            )
            _log.info("resuming task %s after a restart", task_id)
            return True
        else:
            message = _agent_message(
                (Part(text=self._config.restart_message),),
                metadata={"reason": "INTERRUPTED_BY_RESTART"},
            )
            await self._store.transition(
                task_id, TaskState.TASK_STATE_FAILED, status_message=message
            )
            _log.info("failed task %s: the agent restarted while it ran", task_id)
            return False

    @property
    def running(self) -> bool:
        """Whether it watches its turns (started with `watch_cancellations`, not closed)."""
        if self._queued:
            return self._open
        return self._watcher is not None and not self._watcher.done()

    def watch_cancellations(self, interval: float = CANCEL_POLL_SECONDS) -> None:
        """Stop turns whose task another process ended (a `CancelTask` that reached another
        server worker): their store state is looked up every `interval` seconds. With a job
        engine nothing is looked up: the engine aborts the turn's job."""
        self._open = True
        if self._queued:
            return
        self._watcher = asyncio.create_task(
            self._watch_cancellations(interval), name="looping-cancel-watcher"
        )

    async def _watch_cancellations(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if not self._running:
                continue
            try:
                ended = await self._store.ended_among(list(self._running))
            except Exception:
                _log.exception("looking up canceled tasks failed; trying again")
                continue
            for task_id in ended:
                _log.info("task %s was ended elsewhere; stopping its turn", task_id)
                self.cancel_local(task_id)

    async def close(self) -> None:
        self._open = False
        if self._watcher is not None:
            self._watcher.cancel()
        jobs = list(self._running.values())
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)

    async def _run(self, task_id: str) -> bool:
        """Run the task's pending turn; `False` when it was not SUBMITTED (nothing began)."""
        began = True
        waiting = True
        _metrics.TURNS_WAITING.inc()
        try:
            async with self._slots:
                waiting = False
                _metrics.TURNS_WAITING.dec()
                _metrics.TURNS_RUNNING.inc()
                try:
                    # A child of the request that accepted the turn (its context was copied).
                    with _tracing.span("turn", a2a__task_id=task_id):
                        began = await self._run_turn(task_id)
                finally:
                    _metrics.TURNS_RUNNING.dec()
        except asyncio.CancelledError:
            _log.info("turn of task %s stopped (canceled)", task_id)
        except StoreUnavailable:
            # The store logged the outage; the turn is taken up again once it is back.
            _log.warning("turn of task %s stopped: the store is unavailable", task_id)
            if self._queued:
                raise  # its job runs again (`RetryLater`)
            self._take_up_later(task_id)
        except Exception:
            _log.exception("turn of task %s failed in the runner", task_id)
            _metrics.TURNS.inc(outcome="failed")
            try:
                await self._store.transition(
                    task_id,
                    TaskState.TASK_STATE_FAILED,
                    allowed_from=[TaskState.TASK_STATE_WORKING],
                    status_message=_agent_message((), metadata={"reason": "RUNNER_ERROR"}),
                )
            except Exception:
                _log.exception("task %s could not be failed either; it stays WORKING", task_id)
        finally:
            if waiting:
                _metrics.TURNS_WAITING.dec()
            self._started.pop(task_id, None)
            # Forgotten in the same step as its waiters are woken: a duplicate arriving one step
            # later must find no running turn (and answer at once), not wait on a fresh event.
            self._forget(task_id, asyncio.current_task())
            self._settle(task_id)
        return began

    def _take_up_later(self, task_id: str) -> None:
        """Embedded: run (or, found WORKING, resume or fail) a turn the store's outage cut off,
        once the store answers again."""
        if self._open:
            asyncio.get_running_loop().create_task(
                self._after_outage(task_id), name=f"looping-retake-{task_id}"
            )

    async def _after_outage(self, task_id: str) -> None:
        delay = OUTAGE_RETRY_FIRST
        while self._open:
            await asyncio.sleep(delay)
            delay = min(delay * 2, OUTAGE_RETRY_MAX)
            if task_id in self._running:
                return  # taken up already (a duplicate, a follow-up)
            try:
                state = await self._store.task_state(task_id)
                if state is TaskState.TASK_STATE_WORKING and not await self._recover(task_id):
                    return
            except StoreUnavailable:
                continue
            if state in _UNSETTLED:
                self.start(task_id)
            return

    def _forget(self, task_id: str, job: asyncio.Future[None] | None) -> None:
        """Drop `job` from the running turns, unless a newer turn of its task took its place."""
        if self._running.get(task_id) is job:
            del self._running[task_id]

    async def _run_turn(self, task_id: str) -> bool:
        bind(task_id=task_id)  # this turn's log lines say which task (and, below, whose)
        begun = await self._store.begin_turn(task_id)
        if begun is None:
            return False  # canceled before it started, taken, or interrupted (WORKING)
        task, caller, turn_message = begun.task, begun.caller, begun.turn_message
        bind(tenant=caller.tenant, subject=caller.subject)
        while True:
            following = await self._one_turn(task, caller, turn_message)
            if following is None:
                return True
            # A follow-up joined the turn unseen: its output is kept, and the follow-up begins
            # the next turn of the same task.
            task, turn_message = await self._store.get(caller, task_id), following

    async def _one_turn(self, task: Task, caller: Identity, turn_message: str) -> str | None:
        """Run the turn that `turn_message` began and write its end; the messageId of the
        follow-up that begins the next one when a follow-up joined that this turn never took."""
        task_id = task.id
        self._started[task_id] = time.monotonic()
        agent = self._agents[caller.tenant]
        at = next(i for i, m in enumerate(task.history) if m.message_id == turn_message)
        latest = task.history[at]
        history = tuple(_content(message) for message in task.history[:at])
        try:
            blocks = parts_to_blocks(latest.parts)
        except (ContentError, ValueError) as exc:
            # The edge refuses such parts; a message stored by an earlier release may hold one.
            _log.warning("task %s: its message cannot be given to the agent: %s", task_id, exc)
            result = TurnResult(TurnOutcome.FAILED, reason="UNSUPPORTED_CONTENT")
            return await self._finish(task, result, turn_message)
        session = SessionRef(caller, task.context_id)
        log = (
            _TurnSession(self._sessions, self._store, session, task_id, turn_message)
            if self._sessions
            else None
        )
        events = _TurnEvents(self._store, task, self._push_progress, self._coalesce_seconds)
        turn = TurnInput(
            events=events,
            task_id=task.id,
            context_id=task.context_id,
            caller=caller,
            message=UserMessage(blocks),
            history=tuple(m for m in history if m is not None),
            a2a_message=latest,
            session=log,
            subtasks=_TaskSubtasks(self._subtasks, task_id) if self._subtasks else None,
            tool_context=ToolContext(
                tenant=caller.tenant,
                instance_id=f"{caller.issuer}#{caller.subject}",  # a caller's tools are its own
                store=self._store_access,
            ),
        )
        gate = self._plugins[caller.tenant]
        if not await gate.should_handle_turn(turn.history, Turn(session, task.id, turn.message)):
            result = TurnResult(TurnOutcome.REJECTED, reason="TURN_GATE_DECLINED")
            return await self._finish(task, result, turn_message)
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
        return await self._finish(task, result, log.taken_through if log else turn_message)

    async def _finish(self, task: Task, result: TurnResult, taken_through: str) -> str | None:
        """Write the turn's end, unless a follow-up joined that the turn did not take: then keep
        its output and return that follow-up's messageId (it begins the next turn)."""
        task_id = task.id
        reply = _agent_message(_parts(result.reply), task=task) if result.reply else None
        status_message = reply
        if result.reason is not None:
            status_message = _agent_message(
                reply.parts if reply else (), metadata={"reason": result.reason}, task=task
            )
        artifacts = [
            Artifact(
                artifact_id=out.artifact_id,
                parts=_parts(out.blocks),
                name=out.name,
                description=out.description,
            )
            for out in result.artifacts
        ]
        write = functools.partial(
            self._store.transition,
            task_id,
            TaskState[result.outcome.value],
            allowed_from=[TaskState.TASK_STATE_WORKING],
            status_message=status_message,
            reply=reply,
            artifacts=artifacts,
            metadata=result.metadata,
            taken_through=taken_through,
            answer_with_message=result.direct_message and result.outcome in _ENDINGS,
        )
        # Shielded: a worker stopping for the outage must not take the agent's answer with it.
        won = await asyncio.shield(asyncio.ensure_future(_patiently(write)))
        if won:
            _log_turn_end(task_id, result, self._started.pop(task_id, None))
            return None
        unseen = await self._store.arrivals(task_id, after=taken_through)
        if unseen and await self._store.next_turn(
            task_id,
            unseen[0].message_id,
            reply=reply,
            artifacts=artifacts,
            metadata=result.metadata,
        ):
            _log.info(
                "task %s: a follow-up joined after its turn's end; it begins the next", task_id
            )
            return unseen[0].message_id
        _log.info("task %s was canceled while its turn ran; its result is discarded", task_id)
        return None

    def _settle(self, task_id: str) -> None:
        event = self._settled.pop(task_id, None)
        if event is not None:
            event.set()
        self._on_settled()


async def _keep_canceled_metadata(agent: Agent, turn: TurnInput, store: TaskStore) -> None:
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


async def _patiently(write: Callable[[], Any]) -> Any:
    """`write()`, tried again while the store is out of reach, for `END_WRITE_PATIENCE_SECONDS`.
    A guarded write is safe to repeat: one whose commit was lost with its connection loses the
    second time (the task is terminal already)."""
    deadline = time.monotonic() + END_WRITE_PATIENCE_SECONDS
    delay = OUTAGE_RETRY_FIRST
    while True:
        try:
            return await write()
        except StoreUnavailable:
            if time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, OUTAGE_RETRY_MAX)


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
    if result.reason:
        fields["reason"] = result.reason
    words = " ".join(f"{name}={value}" for name, value in fields.items())
    _log.info("turn of task %s ended: %s", task_id, words, extra=fields)


class _TurnEvents:
    """A turn's progress and early artifacts, written as the task's events. Appended chunks of
    an artifact wait up to `coalesce` seconds and go out as one event, so a fast model cannot
    flood the store; anything else first sends what waits, so events keep their order."""

    def __init__(self, store: TaskStore, task: Task, push: bool, coalesce: float) -> None:
        self._store = store
        self._task = task
        self._task_id = task.id
        self._push = push
        self._coalesce = coalesce
        self._waiting: dict[str, tuple[Artifact, bool]] = {}
        """Chunks not sent yet, by artifact: the artifact with all their parts, last_chunk."""
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None

    async def progress(self, blocks: Sequence[Block]) -> None:
        await self.flush()
        message = _agent_message(_parts(tuple(blocks)), task=self._task)
        async with self._lock:
            await self._store.progress(self._task_id, message, push=self._push)

    async def artifact(
        self, artifact: ArtifactOut, *, append: bool = False, last_chunk: bool = False
    ) -> None:
        parts = _parts(artifact.blocks)
        if not parts:
            return
        wire = Artifact(
            artifact_id=artifact.artifact_id,
            parts=parts,
            name=artifact.name,
            description=artifact.description,
        )
        if not append:
            await self.flush()
            async with self._lock:
                await self._store.artifact_update(
                    self._task_id, wire, append=False, last_chunk=last_chunk
                )
            return
        waiting = self._waiting.get(artifact.artifact_id)
        if waiting is not None:
            wire = attrs.evolve(waiting[0], parts=_joined(waiting[0].parts, parts))
        self._waiting[artifact.artifact_id] = (wire, last_chunk)
        if last_chunk or self._coalesce <= 0:
            await self.flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._coalesce, self._flush_later)

    def _flush_later(self) -> None:
        self._timer = None
        self._flushing = asyncio.create_task(self.flush(), name=f"looping-events-{self._task_id}")

    async def flush(self) -> None:
        """Send the chunks that wait (the runner calls it when the turn ends)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self._lock:
            waiting, self._waiting = self._waiting, {}
            for artifact, last_chunk in waiting.values():
                await self._store.artifact_update(
                    self._task_id, artifact, append=True, last_chunk=last_chunk
                )


def _joined(first: tuple[Part, ...], then: tuple[Part, ...]) -> tuple[Part, ...]:
    """Parts of two chunks as one: text running on from text is one text part."""
    if first and then and _plain_text(first[-1]) and _plain_text(then[0]):
        merged = Part(text=(first[-1].text or "") + (then[0].text or ""))
        return (*first[:-1], merged, *then[1:])
    return first + then


def _plain_text(part: Part) -> bool:
    return part.text is not None and not part.metadata and not part.filename


class _TurnSession:
    """The caller's session as the agent sees it: bound to its conversation and to this turn (a
    task's follow-up is a new turn; a resumed turn is the same one). It also hands the turn the
    follow-ups that join it, and remembers the last one it took (`taken_through`)."""

    def __init__(
        self,
        sessions: SessionStore,
        tasks: TaskStore,
        session: SessionRef,
        task_id: str,
        turn: str,
        *,
        takes_follow_ups: bool = True,
    ) -> None:
        self._takes_follow_ups = takes_follow_ups
        self._sessions = sessions
        self._tasks = tasks
        self._session = session
        self._task_id = task_id
        self._turn = turn
        self.taken_through = turn
        """The messageId of the last message of the task this turn took."""
        self._read: list[tuple[ContentMessage, str | None]] | None = None
        """The session as last read; an append makes it stale."""

    async def _entries(self) -> list[tuple[ContentMessage, str | None]]:
        if self._read is None:
            self._read = await self._sessions.entries(self._session)
        return self._read

    async def history(self) -> list[ContentMessage]:
        return [message for message, _ in await self._entries()]

    async def this_turn(self) -> list[ContentMessage]:
        return [message for message, turn in await self._entries() if turn == self._turn]

    async def append(self, messages: Sequence[ContentMessage]) -> None:
        self._read = None
        await self._sessions.append(self._session, messages, task_id=self._task_id, turn=self._turn)

    def subagent(self, scope: str) -> _TurnSession:
        # The unit separator cannot be in a caller's contextId (the edge refuses control
        # characters), so no conversation of a caller can name a subagent's session.
        context = SUBAGENT_SEPARATOR.join((self._session.context_id, self._task_id, scope))
        return _TurnSession(
            self._sessions,
            self._tasks,
            SessionRef(self._session.caller, context),
            self._task_id,
            scope,
            takes_follow_ups=False,
        )

    async def arrivals(self) -> list[ContentMessage]:
        if not self._takes_follow_ups:
            return []
        joined = await self._tasks.arrivals(self._task_id, after=self.taken_through)
        if not joined:
            return []
        held = {turn for _, turn in await self._entries()}  # a resumed turn took some already
        taken = []
        for message in joined:
            content = None if message.message_id in held else _content(message)
            if content is None:
                continue
            self._read = None
            # Its own messageId marks it as taken, for a turn resumed after a crash.
            await self._sessions.append(
                self._session, [content], task_id=self._task_id, turn=message.message_id
            )
            taken.append(content)
        self.taken_through = joined[-1].message_id
        return taken

    async def displace(
        self, displaced: Sequence[ContentMessage], replacement: Sequence[ContentMessage]
    ) -> bool:
        self._read = None
        removed = await self._sessions.displace(
            self._session, len(displaced), replacement, expected=displaced
        )
        return bool(removed)


class _TaskSubtasks:
    """The subtask store bound to one task, as the agent sees it."""

    def __init__(self, store: SubtaskStore, task_id: str) -> None:
        self._store = store
        self._task_id = task_id

    async def add(self, subtasks: Sequence[SubtaskRecord]) -> None:
        if any(s.task_id != self._task_id for s in subtasks):
            raise ValueError("a subtask of another task")
        await self._store.add(subtasks)

    async def subtasks(self) -> list[SubtaskRecord]:
        return await self._store.subtasks(self._task_id)

    async def update(self, subtask: SubtaskRecord) -> None:
        if subtask.task_id != self._task_id:
            raise ValueError("a subtask of another task")
        await self._store.update(subtask)


def _agent_message(
    parts: tuple[Part, ...], metadata: dict[str, str] | None = None, *, task: Task | None = None
) -> Message:
    """The agent's message (to `task`: its ids set, as a server's messages carry them)."""
    if not parts:
        parts = (Part(data=dict(metadata or {})),)
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        parts=parts,
        metadata=metadata,
        task_id=task.id if task else "",
        context_id=task.context_id if task else "",
    )


def _parts(blocks: tuple[Block, ...]) -> tuple[Part, ...]:
    """A2A parts for the blocks that have an A2A form; a refusal stays marked as one."""
    parts = []
    for block in blocks:
        if isinstance(block, RefusalBlock):
            parts.append(Part(text=block.text, metadata={REFUSAL_METADATA: True}))
            continue
        try:
            parts.append(block_to_part(block))
        except ContentError:
            continue  # thinking and tool traffic stay inside the agent
    return tuple(parts)


def _content(message: Message) -> ContentMessage | None:
    """A stored A2A message in the content vocabulary (`None` if nothing of it maps)."""
    try:
        blocks = parts_to_blocks(message.parts)
    except ContentError:
        return None
    if message.role is Role.ROLE_USER:
        return UserMessage(blocks) if blocks else None
    kept = [b for b in blocks if isinstance(b, TextBlock | ImageBlock | AudioBlock)]
    return AssistantMessage(kept)
