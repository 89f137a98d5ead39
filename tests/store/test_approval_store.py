"""Tool calls that wait for approval, on both stores: asked for once, decided all at once with
the caller's message or not at all, begun by exactly one of any number of racing workers, and
ended once."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from looping_core.a2a import Message, Part, Role, TaskState
from looping_core.content import Decision, ToolApproval
from looping_core.contract import Identity
from looping_core.store.internal import (
    ApprovalRefused,
    ApprovalStore,
    Database,
    StoreRefusal,
    TaskStore,
)

ALICE = Identity("t", "https://gw.example", "alice")
PAY = ToolApproval("c1", "pay", {"amount": 250})
REFUND = ToolApproval("c2", "refund", {"amount": 300})


def _message(task_id: str = "", text: str = "go") -> Message:
    return Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text=text),),
        task_id=task_id,
    )  # fmt: skip


async def _waiting(database: Database) -> tuple[TaskStore, str]:
    """A task whose turn ended INPUT_REQUIRED, its calls asked for."""
    store = TaskStore(database)
    start = await store.start_turn(ALICE, _message(), None)
    task_id = start.task.id
    begun = await store.begin_turn(task_id)
    assert begun is not None
    await ApprovalStore(database).ask(task_id, [PAY, REFUND])
    await ApprovalStore(database).ask(task_id, [PAY])  # asked again after a crash: no change
    await store.transition(task_id, TaskState.TASK_STATE_INPUT_REQUIRED)
    return store, task_id


async def test_calls_are_asked_for_once_and_decided_with_the_callers_message(
    database: Database,
) -> None:
    store, task_id = await _waiting(database)
    approvals = ApprovalStore(database)
    assert await approvals.approvals(task_id) == [PAY, REFUND]
    decisions = [Decision("c1", True), Decision("c2", False, "not now")]
    start = await store.start_turn(ALICE, _message(task_id), None, decisions=decisions)
    assert start.started
    assert [(a.call_id, a.state, a.reason) for a in await approvals.approvals(task_id)] == [
        ("c1", "approved", ""),
        ("c2", "denied", "not now"),
    ]


@pytest.mark.parametrize(
    ("decisions", "problem"),
    [
        (None, "the task waits for decisions on its tool calls (c1, c2)"),
        ([Decision("c1", True)], "decide every pending call at once; missing: c2"),
        (
            [Decision("c1", True), Decision("c2", True), Decision("c9", True)],
            "no pending call of this task has the id 'c9' (pending: c1, c2)",
        ),
    ],
)
async def test_an_answer_that_does_not_decide_exactly_the_pending_calls_writes_nothing(
    database: Database, decisions: list[Decision] | None, problem: str
) -> None:
    store, task_id = await _waiting(database)
    with pytest.raises(ApprovalRefused) as refused:
        await store.start_turn(ALICE, _message(task_id), None, decisions=decisions)
    assert problem in str(refused.value)
    task = await store.get(ALICE, task_id)
    assert task.status.state is TaskState.TASK_STATE_INPUT_REQUIRED
    assert len(task.history) == 1  # the answer was not written
    states = {a.state for a in await ApprovalStore(database).approvals(task_id)}
    assert states == {"pending"}


async def test_decisions_once_decided_are_refused(database: Database) -> None:
    store, task_id = await _waiting(database)
    both = [Decision("c1", True), Decision("c2", True)]
    await store.start_turn(ALICE, _message(task_id), None, decisions=both)
    with pytest.raises(ApprovalRefused, match="no tool call of this task waits"):
        await store.start_turn(ALICE, _message(task_id), None, decisions=both)


async def test_only_one_of_many_racing_workers_begins_an_approved_call(
    database: Database, store_url: str
) -> None:
    store, task_id = await _waiting(database)
    both = [Decision("c1", True), Decision("c2", False)]
    await store.start_turn(ALICE, _message(task_id), None, decisions=both)
    workers = [Database.from_url(store_url) for _ in range(4)]  # as many processes
    try:
        won = await asyncio.gather(
            *(ApprovalStore(w).start(task_id, "c1") for w in workers for _ in range(3))
        )
        assert sorted(won) == [False] * 11 + [True]
        assert not await ApprovalStore(workers[0]).start(task_id, "c2")  # denied: never
    finally:
        for worker in workers:
            worker.close()
    approvals = ApprovalStore(database)
    await approvals.finish(task_id, "c1")
    await approvals.finish(task_id, "c2")
    rows = await approvals.approvals(task_id)
    assert [(a.state, a.ended) for a in rows] == [("done", True), ("denied", True)]
    assert not await approvals.start(task_id, "c1")  # ended: never again


async def test_of_two_answers_racing_on_two_connections_one_is_taken(
    database: Database, store_url: str
) -> None:
    _, task_id = await _waiting(database)
    workers = [Database.from_url(store_url) for _ in range(2)]
    try:
        answers = [
            [Decision("c1", True), Decision("c2", True)],
            [Decision("c1", False, "no"), Decision("c2", False, "no")],
        ]
        outcomes = await asyncio.gather(
            *(
                TaskStore(worker).start_turn(ALICE, _message(task_id), None, decisions=answer)
                for worker, answer in zip(workers, answers, strict=True)
            ),
            return_exceptions=True,
        )
    finally:
        for worker in workers:
            worker.close()
    taken = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, StoreRefusal)]
    assert (len(taken), len(refused)) == (1, 1), outcomes
    states = {a.state for a in await ApprovalStore(database).approvals(task_id)}
    assert states in ({"approved"}, {"denied"})  # one answer whole, never a mix
    task = await TaskStore(database).get(ALICE, task_id)
    assert len(task.history) == 2  # the question's turn and the one answer taken
