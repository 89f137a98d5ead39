"""What runs turns and delivers pushes, for a server process and for a `looping worker` alike:
the store, the runner, the push deliverer, and with a job engine the engine and its worker.

Embedded (SQLite): the runner runs the turns this process accepted, the deliverer's loop sends
this process's pushes, and turns a crash left are recovered at start. Job engine (PostgreSQL):
the store defers a job with every turn and push, and this process runs jobs (`run_jobs`)
whoever accepted them; the engine recovers dead workers' jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import aiohttp
import attrs

from looping_core.runner.internal import (
    EngineRunner,
    LocalRunner,
    PushDeliverer,
    Runner,
    TurnDriver,
    keep_pruning,
)
from looping_core.store.internal import (
    ApprovalStore,
    Database,
    PluginAccess,
    SessionStore,
    SubtaskStore,
    TaskStore,
)

if TYPE_CHECKING:
    from looping_core.runner.internal import JobEngine
    from looping_core.server._startup import Startup

__all__ = ["Runtime", "open_runtime"]


@attrs.frozen
class Runtime:
    store: TaskStore
    runner: Runner
    deliverer: PushDeliverer
    session: aiohttp.ClientSession
    """For fetching gateways' key sets and sending pushes."""
    jobs: JobEngine | None
    """The job engine (`None`: embedded)."""

    @property
    def running(self) -> dict[str, bool]:
        """Which of its parts run now (readiness): the runner, and the deliverer (embedded) or
        this process's job workers (`jobs`: false from the moment one stopped, a store outage
        say, until it runs again)."""
        parts = {"runner": self.runner.running}
        if self.jobs is None:
            parts["push"] = self.deliverer.running
        else:
            parts["jobs"] = self.jobs.running
        return parts


@asynccontextmanager
async def open_runtime(
    startup: Startup,
    database: Database,
    *,
    node: str,
    worker: int,
    run_jobs: bool,
    concurrency: int | None = None,
    queues: Sequence[str] | None = None,
) -> AsyncIterator[Runtime]:
    """Start them for the block; stop them (and close the agents) after it. `run_jobs`: with a
    job engine, run jobs of `queues` (default: all) in this process too, `concurrency` turns at
    a time (default: `[runner] concurrency`)."""
    config = startup.config
    engine = startup.uses_job_engine
    hooks = None
    if engine:
        from looping_core.runner.internal import EngineHooks  # noqa: PLC0415 - postgres extra

        hooks = EngineHooks()
    store = TaskStore(database, node=node, worker=worker, jobs=hooks, secrets=startup.push_secrets)
    async with aiohttp.ClientSession() as session:
        deliverer = PushDeliverer(store, session, startup.signer, config.push)
        turns = TurnDriver(
            store,
            startup.agents,
            startup.tenant_plugins,
            config.runner,
            sessions=SessionStore(database, node=node, worker=worker),
            subtasks=SubtaskStore(database, node=node, worker=worker),
            approvals=ApprovalStore(database, node=node, worker=worker),
            store_access=PluginAccess(database),
            push_progress=config.push.progress,
            coalesce_seconds=config.streaming.coalesce_seconds,
        )
        runner: Runner
        jobs = None
        if engine:
            from looping_core.runner.internal import JobEngine  # noqa: PLC0415 - postgres extra

            jobs = JobEngine(
                startup.store_url, store, turns, deliverer, config.runner,
                database=database, retention=config.retention,
            )  # fmt: skip
            runner = EngineRunner(store, turns, jobs)
            await jobs.open()
        else:
            runner = LocalRunner(store, turns)
        pruning: asyncio.Task[None] | None = None
        try:
            await runner.open()
            if jobs is None:
                deliverer.start()
                if worker == 0:  # one timer per store (the supervisor's other workers share it)
                    pruning = asyncio.create_task(
                        keep_pruning(database, config.retention), name="looping-retention"
                    )
            elif run_jobs:
                from looping_core.runner.internal import JOB_QUEUES  # noqa: PLC0415

                jobs.start(
                    concurrency=concurrency or config.runner.concurrency,
                    queues=queues or JOB_QUEUES,
                )
            yield Runtime(store, runner, deliverer, session, jobs)
        finally:
            if pruning is not None:
                pruning.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pruning
            if jobs is not None:
                await jobs.close()  # its worker first: it stops the turns it runs
            await runner.close()
            await deliverer.stop()
            await startup.aclose()
