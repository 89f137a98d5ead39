"""Task generations, as the A2A 1.1 draft has them (branch `dev-1.1` of a2aproject/A2A, commit
28491879, PR #1810), for calls answered in 1.1 (`A2A-Version: 1.1` with `[server]
a2a_1_1_draft = true`).

A task's generation is 1 when it is created and one more per change, each change one event. The
store already numbers every task's events in the transaction that makes the change, from 1, so
a task whose latest event is number `n` is at generation `n + 1`, and event `n` carries `n + 1`.
Every read here takes the event number and the task in one snapshot of the store
(`stream_start`): the generation shown is the one of the task it comes with.
"""

from __future__ import annotations

import asyncio

import attrs

from looping_core.a2a import Task
from looping_core.a2a.internal import Int64
from looping_core.server._call_path import CallContext

__all__ = ["current_task", "generation_of", "trim_history", "with_generation"]


def with_generation(task: Task, latest_event: int) -> Task:
    """`task` as it stood when its latest event was number `latest_event`."""
    return attrs.evolve(task, generation=Int64(latest_event + 1))


def trim_history(task: Task, history_length: int | None) -> Task:
    """`task` with at most the last `history_length` messages of its history."""
    if history_length is None:
        return task
    return attrs.evolve(task, history=task.history[-history_length:] if history_length else ())


async def generation_of(context: CallContext, task_id: str) -> int:
    """The caller's task's generation now."""
    _, latest = await context.store.latest_event(context.identity, task_id)
    return latest + 1


async def current_task(
    context: CallContext, task_id: str, history_length: int | None, past: int | None
) -> Task:
    """The caller's task with its generation. With `past` (GetTask's `currentGeneration`), held
    until its generation passes `past`, for at most the tenant's `max_wait_seconds`: then it is
    answered as it is. A task that ended is answered at once (it changes no more)."""
    task, latest = await context.store.stream_start(context.identity, task_id)
    if past is not None and latest + 1 <= past and not task.status.state.is_terminal:
        await _wait_past(context, task_id, past)
        task, latest = await context.store.stream_start(context.identity, task_id)
    return trim_history(with_generation(task, latest), history_length)


async def _wait_past(context: CallContext, task_id: str, past: int) -> None:
    """Until the task has event `past` (its generation is then `past + 1`) or the wait's bound.
    The event hub's reads and notices wake it, as they wake streams (on PostgreSQL, whichever
    process or machine wrote it); the wait holds one of the caller's stream slots. Without
    streams, the store is asked every `[streaming] poll_seconds`."""
    config = context.services.edge.config
    seconds = config.tenants[context.identity.tenant].max_wait_seconds
    hub = context.services.streams
    if hub is not None:
        release = hub.reserve(context.identity)
        try:
            await hub.wait_for_event(task_id, past - 1, seconds)
        finally:
            release()
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        _, latest = await context.store.latest_event(context.identity, task_id)
        if latest >= past:
            return
        await asyncio.sleep(min(config.streaming.poll_seconds, deadline - loop.time()))
