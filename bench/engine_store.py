"""The store's side of a job engine's turn on PostgreSQL, on its own and one turn at a time: the
CPU PostgreSQL and this process spend per turn, without HTTP, workers or an agent, so a change to
the turn's statements can be judged by itself on a noisy machine.

    python bench/engine_store.py [--turns 1000] [--rounds 3]

Each turn is what the engine asks of the store: a new task accepted with a push config (its job
deferred by procrastinate, `EngineHooks`), begun, and ended COMPLETED by its job with a reply and
one artifact, queuing the push the job would deliver; the runner tells the end the task's
context. One throwaway PostgreSQL server on this machine (bench/throwaway_postgres.py); 300
turns to warm up, then `--rounds` rounds of `--turns`. PostgreSQL's CPU is every backend's and
the postmaster's, read from /proc. Numbers only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import psycopg

from looping_core.a2a import Artifact, Message, Part, Role, TaskPushNotificationConfig, TaskState
from looping_core.contract import Identity
from looping_core.runner._engine_jobs import EngineHooks
from looping_core.runner._engine_schema import apply_engine_schema
from looping_core.store.internal import Database, JobTicket, TaskStore, bind, upgrade

from throwaway_postgres import postgres_cpu, throwaway_postgres  # bench/ is on the path

CALLER = Identity("words", "https://gateway.example", "caller")
PUSH = TaskPushNotificationConfig(url="https://gateway.example/push", token="t0k")
WARM_UP = 300


async def one_turn(store: TaskStore) -> None:
    asked = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=(Part(text="hi"),))
    task = (await store.start_turn(CALLER, asked, PUSH)).task
    begun = await store.begin_turn(task.id)
    assert begun is not None
    reply = Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_AGENT, parts=(Part(text="Counted 1."),),
        task_id=task.id, context_id=task.context_id,
    )  # fmt: skip
    end = await store.end_turn(
        task.id, TaskState.TASK_STATE_COMPLETED, status_message=reply, reply=reply,
        artifacts=[Artifact(artifact_id="count", parts=(Part(data={"words": 1}),))],
        taken_through=begun.turn_message, job=JobTicket(1), context_id=task.context_id,
    )  # fmt: skip
    assert end.won
    assert end.pushes


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with throwaway_postgres() as url:
        with psycopg.connect(url, autocommit=True) as connection:
            apply_engine_schema(connection)
        database = Database.from_url(url)
        await database.run_alone(lambda: (bind(database.peewee), upgrade(database.peewee)))
        store = TaskStore(database, jobs=EngineHooks())
        try:
            for _ in range(WARM_UP):
                await one_turn(store)
            rounds = []
            for _ in range(args.rounds):
                server, process = postgres_cpu(url), time.process_time()
                began = time.perf_counter()
                for _ in range(args.turns):
                    await one_turn(store)
                spent = (
                    (postgres_cpu(url) - server) * 1e6 / args.turns,
                    (time.process_time() - process) * 1e6 / args.turns,
                    (time.perf_counter() - began) * 1e6 / args.turns,
                )
                rounds.append(spent)
                print(f"PostgreSQL {spent[0]:5.0f} µs/turn   this process {spent[1]:5.0f} µs/turn"
                      f"   wall {spent[2]:5.0f} µs/turn", flush=True)  # fmt: skip
            medians = [statistics.median(column) for column in zip(*rounds, strict=True)]
            print(f"median: PostgreSQL {medians[0]:.0f} µs, this process {medians[1]:.0f} µs,"
                  f" wall {medians[2]:.0f} µs per turn")  # fmt: skip
        finally:
            database.close()


if __name__ == "__main__":
    asyncio.run(main())
