"""The task store on its own (SQLite): the CPU one turn's writes cost, without HTTP, tokens or
an agent, so a change to the store's statements or schema can be judged by itself.

    python bench/store_turns.py [--turns 16000] [--concurrency 16] [--rounds 3]
                                [--json results.json]

Each turn is what SendMessage with `returnImmediately` asks of the store: `start_turn` (a new
task accepted and begun in one transaction) and `transition` to COMPLETED with one artifact,
`--concurrency` turns at a time on one event loop, group-committed by the store's thread as in
`looping serve`. It prints, per turn, the CPU time of the store's thread (statements, commits,
the Python around them) and of the event loop's thread (awaiting the store), and the wall time.
Each round measures the store as it is (version 7 UUIDs for new tasks and contexts) and then with
version 4 ones, for comparison: random ids cost more as the tables grow, so a run leaves 20,000
tasks behind (`--turns` and a quarter of them to warm up). Numbers only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from looping_core.a2a import Artifact, Message, Part, Role, TaskState
from looping_core.contract import Identity
from looping_core.store import _turn_starts
from looping_core.store.internal import Database, TaskStore, upgrade

from bench_results import write_results  # bench/ is on the path

CALLER = Identity("words", "http://127.0.0.1:9000", "caller")


async def one_turn(store: TaskStore) -> None:
    message = Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=(Part(text="one two three"),)
    )
    start = await store.start_turn(CALLER, message, None, begin=True)
    artifact = Artifact(artifact_id="count", parts=(Part(text="3"),))
    await store.transition(start.task.id, TaskState.TASK_STATE_COMPLETED, artifacts=[artifact])


async def turns(store: TaskStore, count: int, concurrency: int) -> None:
    async def client(first: int) -> None:
        for _ in range(first, count, concurrency):
            await one_turn(store)

    await asyncio.gather(*(client(first) for first in range(concurrency)))


async def measure(folder: Path, args: argparse.Namespace) -> dict[str, float]:
    database = Database.from_url(f"sqlite:///{folder / 'store.db'}")
    try:
        await database.run_alone(upgrade, database.peewee)
        store = TaskStore(database)
        await turns(store, args.turns // 4, args.concurrency)  # warm up, and a table not empty
        store_cpu = await database.run_alone(time.thread_time)
        loop_cpu, wall = time.thread_time(), time.perf_counter()
        await turns(store, args.turns, args.concurrency)
        wall = time.perf_counter() - wall
        loop_cpu = time.thread_time() - loop_cpu
        store_cpu = await database.run_alone(time.thread_time) - store_cpu
    finally:
        database.close()
    per_turn = 1000 / args.turns
    return {"store_ms": store_cpu * per_turn, "loop_ms": loop_cpu * per_turn,
            "wall_ms": wall * per_turn}  # fmt: skip


@contextlib.contextmanager
def random_ids() -> Iterator[None]:
    """Version 4 ids for new tasks and contexts, for the comparison: a benchmark's switch into
    the store's private module, not an API."""
    own = _turn_starts.new_id
    _turn_starts.new_id = lambda: str(uuid.uuid4())
    try:
        yield
    finally:
        _turn_starts.new_id = own


KINDS = {"version 7 ids (the store's)": contextlib.nullcontext, "version 4 ids": random_ids}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=16000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--json", type=Path, help="also write the medians here (bench/report.py renders them)"
    )
    args = parser.parse_args()
    print(f"{args.turns} turns, {args.concurrency} at a time, SQLite", flush=True)
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    for round_number in range(1, args.rounds + 1):
        for kind, ids in KINDS.items():  # taking turns: a slow spell of the machine hits both
            with ids(), tempfile.TemporaryDirectory(prefix="looping-bench-store-") as folder:
                result = await measure(Path(folder), args)
            results[kind].append(result)
            print(
                f"round {round_number}, {kind:<28} store thread {result['store_ms']:.3f} ms CPU"
                f" per turn, event loop {result['loop_ms']:.3f} ms, wall {result['wall_ms']:.3f}"
                " ms",
                flush=True,
            )
    medians = {
        kind: {key: statistics.median(each[key] for each in runs) for key in runs[0]}
        for kind, runs in results.items()
    }
    for kind, median in medians.items():
        print(
            f"median, {kind:<28} store thread {median['store_ms']:.3f} ms CPU per turn,"
            f" event loop {median['loop_ms']:.3f} ms, wall {median['wall_ms']:.3f} ms"
        )
    if args.json:
        series = {kind: {args.concurrency: median} for kind, median in medians.items()}
        write_results(args.json, "store_turns", series, turns=args.turns, rounds=args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
