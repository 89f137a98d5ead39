"""The job engine's worker says it is stopping the moment it stops fetching, not once it has
drained its running jobs: readiness must not say "running" meanwhile (a store outage makes a
fetch fail, and the worker then waits for its jobs for up to the grace before it returns).

procrastinate's in-memory connector stands in for PostgreSQL: the fetch is made to fail the way
a store that went away makes it fail, at a moment the test chooses."""

from __future__ import annotations

import asyncio
from typing import Any

import procrastinate
import pytest
from procrastinate import exceptions as engine_errors
from procrastinate.testing import InMemoryConnector

from looping_core.runner._engine_jobs import Worker


async def test_a_worker_whose_fetch_fails_says_so_before_it_drains_its_running_jobs() -> None:
    connector = InMemoryConnector()
    app = procrastinate.App(connector=connector)
    started, release = asyncio.Event(), asyncio.Event()

    @app.task(name="held", queue="q")
    async def held() -> None:
        started.set()
        await release.wait()

    stops: list[bool] = []
    async with app.open_async():
        await held.defer_async()
        worker = Worker(
            on_stop=lambda: stops.append(True),
            app=app,
            queues=["q"],
            concurrency=2,
            wait=True,
            install_signal_handlers=False,
            listen_notify=False,
            fetch_job_polling_interval=0.05,
            shutdown_graceful_timeout=30,
        )
        running = asyncio.create_task(worker.run())
        async with asyncio.timeout(10):
            await started.wait()
        assert stops == []  # fetching works: nothing said

        async def store_gone(**_: Any) -> dict[str, Any]:
            raise engine_errors.ConnectorException("the store went away")

        connector.fetch_job_one = store_gone  # type: ignore[method-assign]
        async with asyncio.timeout(10):
            while not stops:
                await asyncio.sleep(0.01)
        assert not running.done()  # said while the held job still runs: the worker drains it
        release.set()
        with pytest.raises(engine_errors.ConnectorException):
            async with asyncio.timeout(10):
                await running
