"""What callers' turns cost per day, on both stores: each turn's end adds its cost to its
caller's day in the same write (an end that lost adds nothing), and a caller whose day has cost
its daily budget is refused its next turn before anything is written."""

from __future__ import annotations

import time
import uuid

import pytest

from looping_core.a2a import Message, Part, Role, TaskState
from looping_core.contract import Identity
from looping_core.store.internal import (
    BudgetSpent,
    Database,
    RetentionPolicy,
    TaskStore,
    TurnLimits,
    prune,
)

ALICE = Identity("t", "https://gateway.example", "alice")
BOB = Identity("t", "https://gateway.example", "bob")
BUDGET = TurnLimits(caller_daily_cost=1.0)
DAY_US = 86_400_000_000


def user_message(message_id: str | None = None, task_id: str | None = None) -> Message:
    return Message(
        message_id=message_id or str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=(Part(text="hi"),),
        task_id=task_id,
    )


async def spend(database: Database) -> list[tuple[str, str, int, float]]:
    def read() -> list[tuple[str, str, int, float]]:
        query = "SELECT tenant, subject, day, cost FROM caller_spend ORDER BY subject, day"
        return [tuple(row) for row in database.execute(query).fetchall()]  # type: ignore[misc]

    return await database.run(read)


async def turn_costing(store: TaskStore, caller: Identity, cost: float | None) -> str:
    start = await store.start_turn(caller, user_message(), None, begin=True)
    assert start.begun is not None
    end = await store.end_turn(start.task.id, TaskState.TASK_STATE_COMPLETED, spent=cost)
    assert end.won
    return start.task.id


def today() -> int:
    return time.time_ns() // 1000 // DAY_US


async def test_each_turns_end_adds_its_cost_to_its_callers_day(database: Database) -> None:
    store = TaskStore(database)
    await turn_costing(store, ALICE, 0.25)
    await turn_costing(store, ALICE, 0.5)
    await turn_costing(store, BOB, 0.125)
    await turn_costing(store, BOB, None)  # no cost known: nothing added
    assert await spend(database) == [
        ("t", "alice", today(), pytest.approx(0.75)),
        ("t", "bob", today(), pytest.approx(0.125)),
    ]


async def test_an_end_that_lost_adds_nothing(database: Database) -> None:
    store = TaskStore(database)
    task_id = await turn_costing(store, ALICE, 0.25)
    again = await store.end_turn(task_id, TaskState.TASK_STATE_FAILED, spent=9.0)
    assert not again.won
    assert await spend(database) == [("t", "alice", today(), pytest.approx(0.25))]


async def test_a_caller_whose_day_has_cost_its_budget_is_refused_before_any_write(
    database: Database,
) -> None:
    store = TaskStore(database)
    first = user_message()
    start = await store.start_turn(ALICE, first, None, begin=True, limits=BUDGET)
    assert start.begun is not None
    await store.end_turn(start.task.id, TaskState.TASK_STATE_INPUT_REQUIRED, spent=0.6)
    assert (await store.start_turn(ALICE, user_message(), None, limits=BUDGET)).started
    await turn_costing(store, ALICE, 0.4)  # 1.0 now: the budget is spent

    def tasks() -> int:
        return int(database.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])

    before = await database.run(tasks)
    with pytest.raises(BudgetSpent) as refused:
        await store.start_turn(ALICE, user_message(), None, limits=BUDGET)
    assert refused.value.limit == 1.0
    assert refused.value.spent == pytest.approx(1.0)
    assert 1 <= refused.value.seconds_left <= 86_400
    # A follow-up to the task that waits for input would begin a turn too.
    with pytest.raises(BudgetSpent):
        await store.start_turn(ALICE, user_message(task_id=start.task.id), None, limits=BUDGET)
    assert await database.run(tasks) == before
    # A retried message still gets its task; another caller has a budget of its own.
    again = await store.start_turn(ALICE, first, None, limits=BUDGET)
    assert (again.started, again.task.id) == (False, start.task.id)
    assert (await store.start_turn(BOB, user_message(), None, limits=BUDGET)).started


async def test_yesterdays_spend_does_not_count_today(database: Database) -> None:
    store = TaskStore(database)

    def spent_yesterday() -> None:
        database.execute(
            "INSERT INTO caller_spend (tenant, issuer, subject, day, cost) VALUES (?, ?, ?, ?, ?)",
            (ALICE.tenant, ALICE.issuer, ALICE.subject, today() - 1, 50.0),
        )

    await database.run(spent_yesterday)
    assert (await store.start_turn(ALICE, user_message(), None, limits=BUDGET)).started


async def test_retention_deletes_the_days_past_it(database: Database) -> None:
    def spent_on(*days: int) -> None:
        for day in days:
            database.execute(
                "INSERT INTO caller_spend (tenant, issuer, subject, day, cost)"
                " VALUES (?, ?, ?, ?, ?)",
                (ALICE.tenant, ALICE.issuer, ALICE.subject, day, 1.0),
            )

    await database.run(spent_on, today() - 40, today() - 31, today() - 29, today())
    policy = RetentionPolicy(finished_after=30 * 86_400, events_after=0, delivered_after=0)
    await prune(database, policy)
    assert [day for _, _, day, _ in await spend(database)] == [today() - 29, today()]
