"""The task store on both stores: SQLite (the embedded default) and a real PostgreSQL server.

Concurrency here is real: SQLite's one store thread group-commits what waits for it; PostgreSQL's
eight threads race on their own connections, so its unique index and guarded updates decide.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import attrs
import psycopg
import pytest

from looping_core.a2a import (
    AuthenticationInfo,
    Message,
    Part,
    Role,
    TaskPushNotificationConfig,
    TaskState,
)
from looping_core.contract import Identity
from looping_core.store.internal import (
    Database,
    JobTicket,
    TaskStore,
    adopt_node,
    adopt_orphans,
    bind,
    migration_status,
    upgrade,
)

JOB = JobTicket(1)
"""A job engine's turn job (on SQLite there is none to finish: its pushes are still handed)."""
ALICE = Identity("t", "https://gateway.example", "alice")
RUNNING = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)


def user_message(message_id: str | None = None) -> Message:
    return Message(
        message_id=message_id or str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="hi"),)
    )


def push_config() -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(url="https://gateway.example/push", token="t0k")


async def test_migrations_are_recorded_and_run_once(database: Database) -> None:
    status = await database.run_alone(migration_status, database.peewee)
    assert status.applied == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)
    assert status.pending == ()
    assert await database.run_alone(upgrade, database.peewee) == []
    columns = await database.run_alone(database.peewee.get_columns, "push_outbox")
    assert "worker" in {column.name for column in columns}


async def test_new_tasks_and_contexts_get_ids_that_grow_with_time(database: Database) -> None:
    # Version 7 UUIDs: each new row lands at the end of the indexes keyed by its id.
    store = TaskStore(database)
    first = await store.start_turn(ALICE, user_message(), None)
    await asyncio.sleep(0.002)  # the next millisecond at least
    second = await store.start_turn(ALICE, user_message(), None)
    ids = [first.task.id, first.task.context_id, second.task.id, second.task.context_id]
    assert [uuid.UUID(each).version for each in ids] == [7, 7, 7, 7]
    assert all(uuid.UUID(each).variant == uuid.RFC_4122 for each in ids)
    assert first.task.id < second.task.id
    assert first.task.context_id < second.task.context_id
    milliseconds = uuid.UUID(second.task.id).int >> 80
    assert abs(milliseconds / 1000 - time.time()) < 60
    assert len({uuid.UUID(each).int & ((1 << 62) - 1) for each in ids}) == 4  # random tails


async def test_fifty_concurrent_duplicates_start_one_turn(database: Database) -> None:
    store = TaskStore(database)
    message = user_message()
    starts = await asyncio.gather(*(store.start_turn(ALICE, message, None) for _ in range(50)))
    assert sum(start.started for start in starts) == 1
    assert len({start.task.id for start in starts}) == 1
    (count,) = await database.run(lambda: database.execute("SELECT COUNT(*) FROM tasks").fetchone())
    assert count == 1


async def test_fifty_concurrent_duplicates_begun_at_once_begin_one_turn(
    database: Database,
) -> None:
    """With `begin` (a runner holds a slot for each), duplicates still start one turn, and only
    it is begun: WORKING, with its WORKING event numbered 1; it cannot be begun again."""
    store = TaskStore(database)
    message = user_message()
    starts = await asyncio.gather(
        *(store.start_turn(ALICE, message, None, begin=True) for _ in range(50))
    )
    [begun] = [start.begun for start in starts if start.begun is not None]
    assert sum(start.started for start in starts) == 1
    assert {start.task.status.state for start in starts if start.started} == {
        TaskState.TASK_STATE_SUBMITTED  # the task as accepted
    }
    assert begun.task.status.state is TaskState.TASK_STATE_WORKING
    assert (begun.caller, begun.turn_message) == (ALICE, message.message_id)
    assert await store.task_state(begun.task.id) is TaskState.TASK_STATE_WORKING
    [event] = await store.events_after({begun.task.id: 0})
    assert event.seq == 1
    assert '"TASK_STATE_WORKING"' in event.body
    assert await store.begin_turn(begun.task.id) is None


async def test_the_same_message_id_from_another_caller_is_another_turn(database: Database) -> None:
    store = TaskStore(database)
    message = user_message()
    first = await store.start_turn(ALICE, message, None)
    other = await store.start_turn(Identity("t", ALICE.issuer, "bob"), message, None)
    assert other.started
    assert other.task.id != first.task.id


async def test_racing_terminal_writes_have_exactly_one_winner(database: Database) -> None:
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, user_message(), push_config())).task
    assert await store.begin_turn(task.id) is not None
    outcomes = [TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED] * 10
    won = await asyncio.gather(*(store.transition(task.id, state) for state in outcomes))
    assert sum(won) == 1
    winner = outcomes[won.index(True)]
    assert (await store.get(ALICE, task.id)).status.state is winner
    [queued] = await store.outbox_rows(task.id)  # one terminal state, one push
    assert queued["state"] == "pending"


async def test_a_turns_end_hands_its_job_the_pushes_it_queued_as_a_read_would(
    database: Database,
) -> None:
    """A turn's end made by a job (`JobTicket`): the pushes it queued get no job of their own
    and come back in what the write returns, the same items another process reads back."""
    store = TaskStore(database)
    elsewhere = TaskStore(database)  # a worker the job would run on after this one died
    authenticated = TaskPushNotificationConfig(
        url="https://gateway.example/push2",
        id="second",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
    )
    task = (await store.start_turn(ALICE, user_message(), push_config())).task
    await store.put_push_config(ALICE, attrs.evolve(authenticated, task_id=task.id))
    assert await store.begin_turn(task.id) is not None
    reply = Message(message_id="r1", role=Role.ROLE_AGENT, parts=(Part(text="done"),))
    end = await store.end_turn(task.id, TaskState.TASK_STATE_COMPLETED, reply=reply, job=JOB)
    assert end.won
    assert not end.job_finished  # its pushes are the job's to deliver (and no engine here)
    assert end.pushes is not None
    read = await elsewhere.untried_pushes(task.id)
    assert list(end.pushes) == read
    assert [item.config_id for item in read] == [task.id, "second"]
    assert read[1].authentication == ("Bearer", "s3cret")
    assert json.loads(read[0].body)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    failed = Message(message_id="r2", role=Role.ROLE_AGENT, parts=(Part(text="no"),))
    assert not await store.transition(task.id, TaskState.TASK_STATE_FAILED, reply=failed)
    assert await store.untried_pushes(task.id) == read  # a write that lost queued nothing


async def test_a_turns_end_that_lost_hands_its_job_nothing(database: Database) -> None:
    """A cancel won over the turn's end: the cancel's push has a job of its own, so the turn's
    job must not be handed it to deliver a second time."""
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, user_message(), push_config())).task
    assert await store.begin_turn(task.id) is not None
    assert await store.transition(task.id, TaskState.TASK_STATE_CANCELED)
    reply = Message(message_id="r1", role=Role.ROLE_AGENT, parts=(Part(text="late"),))
    end = await store.end_turn(task.id, TaskState.TASK_STATE_COMPLETED, reply=reply, job=JOB)
    assert not end.won
    assert end.pushes == ()
    [queued] = await store.outbox_rows(task.id)  # the cancel's push, still pending for its own job
    assert queued["state"] == "pending"
    assert await store.untried_pushes(task.id) != []  # what a read would have found


async def test_a_turns_end_retried_after_its_commit_hands_its_job_what_it_queued(
    database: Database,
) -> None:
    """The store went away as a turn's end committed, so the write was tried again (the
    worker's `patiently`) and found the task ended as it wanted: that counts as won, and says
    that its pushes are to be read back (the first try queued them with no job of their own;
    taking the retry for a lost race with a cancel left them undelivered until the next
    start)."""
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, user_message(), push_config())).task
    assert await store.begin_turn(task.id) is not None
    reply = Message(message_id="r1", role=Role.ROLE_AGENT, parts=(Part(text="done"),))
    completed = TaskState.TASK_STATE_COMPLETED
    first = await store.end_turn(task.id, completed, reply=reply, job=JOB)
    assert first.won
    assert first.pushes is not None
    assert len(first.pushes) == 1
    again = await store.end_turn(task.id, completed, reply=reply, job=JOB)
    assert again.won
    assert again.pushes is None
    assert not again.job_finished
    pushes = await store.untried_pushes(task.id)
    assert [json.loads(item.body)["task"]["status"]["state"] for item in pushes] == [
        "TASK_STATE_COMPLETED"
    ]
    assert len(await store.outbox_rows(task.id)) == 1  # the retry queued nothing more
    # A cancel that won is still told apart: its push keeps its own job.
    other = (await store.start_turn(ALICE, user_message(), push_config())).task
    assert await store.begin_turn(other.id) is not None
    assert await store.transition(other.id, TaskState.TASK_STATE_CANCELED)
    lost = await store.end_turn(other.id, completed, reply=reply, job=JOB)
    assert not lost.won
    assert lost.pushes == ()


async def test_writes_that_queue_pushes_tell_the_deliverer_after_their_commit(
    database: Database,
) -> None:
    """The embedded deliverer is woken by the writes that queued pushes, once each committed
    (`watch_pushes`), and by no other write: most turns have no push config."""
    store = TaskStore(database)
    told: list[int] = []
    store.watch_pushes(lambda: told.append(len(told)))
    quiet = (await store.start_turn(ALICE, user_message(), None)).task
    assert await store.begin_turn(quiet.id) is not None
    reply = Message(message_id="r1", role=Role.ROLE_AGENT, parts=(Part(text="done"),))
    assert (await store.end_turn(quiet.id, TaskState.TASK_STATE_COMPLETED, reply=reply)).won
    assert told == []
    pushed = (await store.start_turn(ALICE, user_message(), push_config())).task
    assert await store.begin_turn(pushed.id) is not None
    reply = attrs.evolve(reply, message_id="r2")
    end = await store.end_turn(pushed.id, TaskState.TASK_STATE_COMPLETED, reply=reply)
    assert end.won
    assert end.pushes == ()  # without a job, its pushes are the deliverer's
    assert told == [0]
    canceled = (await store.start_turn(ALICE, user_message(), push_config())).task
    await store.cancel(ALICE, canceled.id)
    assert told == [0, 1]
    [row] = await store.outbox_rows(canceled.id)
    assert row["state"] == "pending"


async def test_a_failed_terminal_write_leaves_no_trace(database: Database) -> None:
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, user_message(), push_config())).task
    await store.transition(task.id, TaskState.TASK_STATE_CANCELED)
    reply = Message(message_id="r1", role=Role.ROLE_AGENT, parts=(Part(text="late"),))
    assert not await store.transition(task.id, TaskState.TASK_STATE_COMPLETED, reply=reply)
    got = await store.get(ALICE, task.id)
    assert got.status.state is TaskState.TASK_STATE_CANCELED
    assert [message.message_id for message in got.history] == [task.history[0].message_id]
    assert len(await store.outbox_rows(task.id)) == 1


async def test_a_finished_turns_reply_is_written_once_and_ends_the_history(
    database: Database,
) -> None:
    """The reply a turn ended with is its status message, kept only on the task's row; every
    read of the history (whole, limited, a blocking answer, a duplicate's) still ends with it."""
    store = TaskStore(database)
    first = user_message()
    task = (await store.start_turn(ALICE, first, None)).task
    assert await store.begin_turn(task.id) is not None
    reply = Message(message_id="r1", role=Role.ROLE_AGENT, parts=(Part(text="done"),))
    end = await store.end_turn(
        task.id,
        TaskState.TASK_STATE_COMPLETED,
        status_message=reply,
        reply=reply,
        answer_with_message=True,
    )
    assert end.won
    stored = await database.run(
        lambda: database.execute(
            "SELECT message_id FROM messages WHERE task_id = ?", (task.id,)
        ).fetchall()
    )
    assert stored == [(first.message_id,)]  # the reply is not written twice
    whole = await store.get(ALICE, task.id)
    assert [m.message_id for m in whole.history] == [first.message_id, "r1"]
    assert whole.history[1].task_id == task.id  # addressed, as the status message is
    assert [m.message_id for m in (await store.get(ALICE, task.id, 1)).history] == ["r1"]
    assert [m.message_id for m in (await store.get(ALICE, task.id, 5)).history] == [
        first.message_id,
        "r1",
    ]
    assert (await store.get(ALICE, task.id, 0)).history == ()
    answered = await store.answer(ALICE, task.id)
    assert isinstance(answered, Message)
    assert answered.message_id == "r1"
    duplicate = await store.start_turn(ALICE, first, None)
    assert not duplicate.started
    assert [m.message_id for m in duplicate.task.history] == [first.message_id, "r1"]


async def test_a_reply_asking_for_input_stays_in_the_history_after_the_next_turn(
    database: Database,
) -> None:
    """An interrupted turn's reply is replaced as the status by the next turn: it is stored in
    the history, before the follow-up, and the final reply after it."""
    store = TaskStore(database)
    task = (await store.start_turn(ALICE, user_message("u1"), None)).task
    assert await store.begin_turn(task.id) is not None
    question = Message(message_id="q1", role=Role.ROLE_AGENT, parts=(Part(text="which?"),))
    assert await store.transition(
        task.id, TaskState.TASK_STATE_INPUT_REQUIRED, status_message=question, reply=question
    )
    follow_up = attrs.evolve(user_message("u2"), task_id=task.id)
    assert (await store.start_turn(ALICE, follow_up, None)).started
    assert await store.begin_turn(task.id) is not None
    final = Message(message_id="r2", role=Role.ROLE_AGENT, parts=(Part(text="this"),))
    assert await store.transition(
        task.id, TaskState.TASK_STATE_COMPLETED, status_message=final, reply=final
    )
    got = await store.get(ALICE, task.id)
    assert [m.message_id for m in got.history] == ["u1", "q1", "u2", "r2"]
    assert got.status.message is not None
    assert got.status.message.message_id == "r2"


@pytest.mark.parametrize(
    ("first", "second"),
    [(("a", 0), ("a", 1)), (("a", 0), ("b", 0))],
    ids=["two workers of one node", "the same slot on two nodes"],
)
async def test_each_owner_recovers_and_delivers_only_its_own_turns(
    database: Database, first: tuple[str, int], second: tuple[str, int]
) -> None:
    stores = [TaskStore(database, node=node, worker=worker) for node, worker in (first, second)]
    tasks = [
        (await store.start_turn(ALICE, user_message(), push_config())).task for store in stores
    ]
    assert [await store.unfinished() for store in stores] == [[tasks[0].id], [tasks[1].id]]
    for store, task in zip(stores, tasks, strict=True):
        await store.begin_turn(task.id)
        await store.transition(task.id, TaskState.TASK_STATE_COMPLETED)
    assert [[item.task_id for item in await store.due_pushes()] for store in stores] == [
        [tasks[0].id],
        [tasks[1].id],
    ]


async def test_a_restart_with_fewer_workers_hands_their_slots_to_live_ones(
    database: Database,
) -> None:
    """Node a ran four workers and restarts with two: slots 2 and 3 go to 0 and 1. Node b's
    turns, in the same slots, stay node b's."""
    slots = [TaskStore(database, node="a", worker=slot) for slot in range(4)]
    running = [(await store.start_turn(ALICE, user_message(), None)).task for store in slots]
    finished = (await slots[3].start_turn(ALICE, user_message(), push_config())).task
    await slots[3].transition(finished.id, TaskState.TASK_STATE_COMPLETED)
    other_node = TaskStore(database, node="b", worker=3)
    theirs = (await other_node.start_turn(ALICE, user_message(), None)).task

    moved = await database.run_alone(adopt_orphans, database, "a", 2)

    assert moved == 3  # two running tasks and one queued push; the finished task stays put
    live = [TaskStore(database, node="a", worker=slot) for slot in range(2)]
    assert await live[0].unfinished() == [running[0].id, running[2].id]
    assert await live[1].unfinished() == [running[1].id, running[3].id]
    assert [item.task_id for item in await live[1].due_pushes()] == [finished.id]
    assert await other_node.unfinished() == [theirs.id]
    assert await database.run_alone(adopt_orphans, database, "a", 2) == 0


async def test_turns_from_before_owners_existed_go_to_the_first_node_to_start(
    database: Database,
) -> None:
    before = TaskStore(database)  # node "", as every row of a release-1 database
    old = (await before.start_turn(ALICE, user_message(), None)).task
    assert await database.run_alone(adopt_orphans, database, "a", 2) == 1
    assert await TaskStore(database, node="a", worker=0).unfinished() == [old.id]
    assert await database.run_alone(adopt_orphans, database, "b", 2) == 0


async def test_a_duplicate_committed_by_another_connection_mid_turn_wins(
    postgres_url: str,
) -> None:
    """PostgreSQL: another server's transaction holds the same messageId, uncommitted, while ours
    checks for it. Ours waits on the unique index, fails when theirs commits, and the retry
    returns their task without starting a turn."""
    scope = (ALICE.tenant, ALICE.issuer, ALICE.subject)
    their_message = '{"messageId":"x","role":"ROLE_USER","parts":[{"text":"theirs"}]}'
    database = Database.from_url(postgres_url)
    await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
    store = TaskStore(database)
    message = user_message()
    other = psycopg.connect(postgres_url)
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "INSERT INTO tasks (id, tenant, issuer, subject, context_id, state, status_ts,"
                " created_ts) VALUES ('theirs', %s, %s, %s, 'ctx', 1, 0, 0)",
                scope,
            )
            cursor.execute(
                "INSERT INTO messages (task_id, tenant, issuer, subject, message_id, body)"
                " VALUES ('theirs', %s, %s, %s, %s, %s)",
                (*scope, message.message_id, their_message),
            )
        ours = asyncio.ensure_future(store.start_turn(ALICE, message, None))
        await asyncio.sleep(0.5)
        assert not ours.done()  # waiting on their uncommitted row
        other.commit()
        start = await asyncio.wait_for(ours, 10)
    finally:
        other.close()
        database.close()
    assert not start.started
    assert start.task.id == "theirs"


async def test_a_gone_nodes_turns_can_be_handed_to_another_node(database: Database) -> None:
    gone, alive = TaskStore(database, node="gone", worker=1), TaskStore(database, node="alive")
    running = (await gone.start_turn(ALICE, user_message(), None)).task
    finished = (await gone.start_turn(ALICE, user_message(), push_config())).task
    await gone.transition(finished.id, TaskState.TASK_STATE_COMPLETED)
    theirs = (await alive.start_turn(ALICE, user_message(), None)).task

    moved = await database.run_alone(adopt_node, database, "gone", "new", 1)

    assert moved == (1, 1)  # the running task and the queued push, not the finished task
    new = TaskStore(database, node="new", worker=0)
    assert await new.unfinished() == [running.id]
    assert [item.task_id for item in await new.due_pushes()] == [finished.id]
    assert await gone.unfinished() == []
    assert await alive.unfinished() == [theirs.id]
