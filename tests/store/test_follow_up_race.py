"""A follow-up that joins a running turn, racing that turn's end on PostgreSQL (two processes):
whichever commits first, the follow-up is never left joined to a task whose turn has ended (no
turn would ever answer it). Either the end sees the join and leaves the follow-up to the next
turn, or the follow-up sees the end and is refused by the ended task (nothing stored)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from looping_core.a2a import Message, Part, Role, TaskState
from looping_core.store.internal import TaskStore, TurnEnd, TurnRefused

from support.working import CALLER, two_stores, working_task


def _follow_up(task_id: str) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=(Part(text="and also"),),
        task_id=task_id,
    )


@pytest.fixture
async def working(postgres_url: str) -> AsyncIterator[tuple[TaskStore, TaskStore, str, str]]:
    """Two stores as two processes, and a task whose turn runs: its id, and the id of the
    message the turn took (its first)."""
    async with two_stores(postgres_url) as (here, there):
        task_id = await working_task(here)
        first = (await here.get(CALLER, task_id)).history[0].message_id
        yield here, there, task_id, first


def _end_there(
    there: TaskStore, task_id: str, taken_through: str, loop: asyncio.AbstractEventLoop
) -> concurrent.futures.Future[TurnEnd]:
    """The other process ends the turn, which took `taken_through` last."""
    ending = there.end_turn(task_id, TaskState.TASK_STATE_COMPLETED, taken_through=taken_through)
    return asyncio.run_coroutine_threadsafe(ending, loop)


async def test_an_end_committed_after_the_follow_up_read_the_task_refuses_the_follow_up(
    working: tuple[TaskStore, TaskStore, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follow-up's write has read the task WORKING; the end commits before the follow-up
    writes anything. The follow-up must not join the ended turn: it is refused as by any
    ended task, and not stored (it was joined to the COMPLETED task, and never answered)."""
    here, there, task_id, first = working
    loop = asyncio.get_running_loop()
    ended: list[concurrent.futures.Future[TurnEnd]] = []
    check = here.turns._check_follow_up

    def end_meanwhile(message: Message, head: Any) -> None:
        if not ended:  # the first try only: the retry reads the task as the end left it
            ended.append(_end_there(there, task_id, first, loop))
            ended[0].result(timeout=10)  # it commits now: the follow-up holds nothing yet
        check(message, head)

    monkeypatch.setattr(here.turns, "_check_follow_up", end_meanwhile)
    follow_up = _follow_up(task_id)
    with pytest.raises(TurnRefused, match="terminal state"):
        await here.start_turn(CALLER, follow_up, None)
    end = await asyncio.wrap_future(ended[0])
    task = await here.get(CALLER, task_id)
    assert end.won
    assert task.status.state is TaskState.TASK_STATE_COMPLETED
    assert follow_up.message_id not in [message.message_id for message in task.history]


async def test_an_end_that_meets_a_join_not_yet_committed_leaves_the_task_to_the_next_turn(
    working: tuple[TaskStore, TaskStore, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follow-up has joined the turn but not committed when the end's statement runs: the
    end waits for the task's row, then finds it joined, and does not end the task; the
    follow-up is there for the next turn (`arrivals`)."""
    here, there, task_id, first = working
    loop = asyncio.get_running_loop()
    ended: list[concurrent.futures.Future[TurnEnd]] = []
    snapshot = here.turns._snapshot

    def end_before_the_commit(*args: Any, **kwargs: Any) -> Any:
        # After the join's writes, before its commit: the end's statement starts now.
        ended.append(_end_there(there, task_id, first, loop))
        time.sleep(0.5)  # time for it to reach the task's row (it waits there)
        return snapshot(*args, **kwargs)

    monkeypatch.setattr(here.turns, "_snapshot", end_before_the_commit)
    follow_up = _follow_up(task_id)
    start = await here.start_turn(CALLER, follow_up, None)
    monkeypatch.undo()
    end = await asyncio.wrap_future(ended[0])
    task = await here.get(CALLER, task_id)
    unseen = await here.arrivals(task_id, after=first)
    assert start.joined
    assert not end.won  # a follow-up joined that the turn did not take
    assert task.status.state is TaskState.TASK_STATE_WORKING
    assert [message.message_id for message in unseen] == [follow_up.message_id]
