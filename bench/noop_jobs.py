"""procrastinate's own ceiling on this machine: how many no-op jobs per second one worker process
runs, on the PostgreSQL server bench/jobs.py measures turns on.

    python bench/noop_jobs.py <postgresql-url> [--jobs 4000] [--concurrency 16]

Applies procrastinate's schema to the (empty) database, analyzes its tables as looping-core does
at every start, defers `--jobs` no-op jobs in one batch, then runs one worker (`--concurrency`
jobs at once, successful jobs deleted, as looping-core's workers run) until the queue is empty,
and prints `NOOP <jobs/s>`. It shares the CPUs with PostgreSQL, as the turns do.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import procrastinate
import psycopg


async def ceiling(url: str, jobs: int, concurrency: int) -> float:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue="noop")
    async def noop(n: int) -> None:
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("ANALYZE procrastinate_jobs")
        await noop.batch_defer_async(*({"n": n} for n in range(jobs)))
        began = time.perf_counter()
        await app.run_worker_async(
            queues=["noop"],
            concurrency=concurrency,
            wait=False,
            delete_jobs="successful",
            install_signal_handlers=False,
        )
        return jobs / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    print(f"NOOP {asyncio.run(ceiling(args.url, args.jobs, args.concurrency)):.1f}", flush=True)


if __name__ == "__main__":
    main()
