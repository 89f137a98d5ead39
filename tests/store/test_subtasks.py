"""Subtasks on both stores: a plan is stored whole or not at all, rows come back in order with
every field, updates change one row, and one task's subtasks are not another's."""

from __future__ import annotations

import uuid

import attrs
import pytest

from looping_core.a2a import Message, Part, Role
from looping_core.contract import Identity, SubtaskRecord
from looping_core.store.internal import Database, StoreRefusal, SubtaskStore, TaskStore

ALICE = Identity("t", "https://gw.example", "alice")


async def a_task(database: Database) -> str:
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="go"),))
    start = await TaskStore(database).start_turn(ALICE, message, None)
    return start.task.id


def plan(task_id: str) -> list[SubtaskRecord]:
    return [
        SubtaskRecord(task_id, "p1/a", "research", {"topic": "milk"}, (), created_us=1),
        SubtaskRecord(task_id, "p1/b", "research", {"topic": "eggs"}, ("p1/a",), created_us=2),
    ]


async def test_a_plan_is_stored_in_order_and_updates_change_one_row(database: Database) -> None:
    store, task_id = SubtaskStore(database), await a_task(database)
    await store.add(plan(task_id))
    assert await store.subtasks(task_id) == plan(task_id)
    done = attrs.evolve(
        plan(task_id)[0],
        state="done",
        result={"summary": "milk", "count": 2},
        attempts=1,
        fingerprint="f" * 64,
        wave=1,
        usage={"input_tokens": 5, "output_tokens": 2},
        started_us=10,
        ended_us=20,
    )
    await store.update(done)
    assert await store.subtasks(task_id) == [done, plan(task_id)[1]]


async def test_a_plan_with_a_taken_id_is_refused_whole(database: Database) -> None:
    store, task_id = SubtaskStore(database), await a_task(database)
    await store.add(plan(task_id)[:1])
    clash = [SubtaskRecord(task_id, "p1/c", "research", {}), plan(task_id)[0]]
    with pytest.raises(StoreRefusal):
        await store.add(clash)
    assert [r.subtask_id for r in await store.subtasks(task_id)] == ["p1/a"]  # no p1/c


async def test_one_tasks_subtasks_are_not_anothers(database: Database) -> None:
    store = SubtaskStore(database)
    first, second = await a_task(database), await a_task(database)
    await store.add(plan(first))
    assert await store.subtasks(second) == []
    await store.add(plan(second))  # the same ids, another task
    assert len(await store.subtasks(first)) == len(await store.subtasks(second)) == 2
