"""`looping worker`: a process that runs the job engine's jobs (turns and pushes) and serves
nothing. Start as many as the load needs, on any machine that reaches the store; `looping serve`
processes accept the turns (and by default run jobs too).

It checks what `serve` checks (the key, the plugins, the agents), then refuses a store whose
migrations or job engine tables are not current: it never migrates, `looping db upgrade` (or a
starting `serve`) does. SIGTERM or SIGINT stops it gracefully: running turns get a few seconds,
then run again elsewhere, as `[runner] on_restart` says.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence

import attrs

from looping_core.config import Config
from looping_core.plugins import PluginHost
from looping_core.server._runtime import open_runtime
from looping_core.server._serving import ServeError, event_loop_factory
from looping_core.server._startup import Startup, assemble
from looping_core.store.internal import (
    Database,
    PushSecrets,
    SecretsUnreadable,
    bind,
    check_sealed_secrets,
    migration_status,
    raise_one_line,
)

__all__ = ["run_worker"]

_log = logging.getLogger("looping_core.server")


def run_worker(
    config: Config,
    plugins: PluginHost,
    *,
    concurrency: int | None = None,
    queues: Sequence[str] | None = None,
) -> None:
    """Run jobs until SIGTERM or SIGINT: `concurrency` turns at a time (default: `[runner]
    concurrency`), of `queues` (default: all)."""
    if not config.uses_job_engine():
        raise ServeError(
            "looping worker runs the job engine's jobs, and this config has none: its store is "
            "SQLite (or [runner] engine is embedded), where `looping serve` runs every turn"
        )
    from looping_core.runner.internal import JOB_QUEUES  # noqa: PLC0415 - postgres extra

    unknown = sorted(set(queues or ()) - set(JOB_QUEUES))
    if unknown:
        raise ServeError(
            f"no job queue named {', '.join(unknown)}; the queues are {', '.join(JOB_QUEUES)}"
        )
    if concurrency is not None:
        config = attrs.evolve(config, runner=attrs.evolve(config.runner, concurrency=concurrency))
    # What serve checks and builds, but no edge: a worker serves no card (it signs pushes only).
    startup = assemble(config, plugins=plugins)
    loop = event_loop_factory(config.server.event_loop)()
    try:
        loop.run_until_complete(_work(startup, queues))
    finally:
        loop.close()


async def _work(startup: Startup, queues: Sequence[str] | None) -> None:
    config = startup.config
    database = Database.from_url(startup.store_url, connections=config.store.connections)
    try:
        await _check_store(database, startup.push_secrets)
        async with open_runtime(
            startup, database, node=startup.node, worker=0, run_jobs=True,
            queues=queues,
        ) as runtime:  # fmt: skip
            assert runtime.jobs is not None
            stopping = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, _stop, stopping, signum)
            _log.info(
                "worker running jobs of %s, %d turns at a time",
                ", ".join(queues) if queues else "every queue", config.runner.concurrency,
            )  # fmt: skip
            # A job worker that the store's outage stopped is started again by the engine, for
            # as long as this process runs: an outage never ends it.
            waiting = asyncio.ensure_future(stopping.wait())
            failed = asyncio.ensure_future(runtime.jobs.wait())
            await asyncio.wait((waiting, failed), return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if failed.done() and not stopping.is_set():
                failed.result()  # the job worker's own error, if it raised one
                raise ServeError("the job worker stopped; see the log above")
    finally:
        database.close()


def _stop(stopping: asyncio.Event, signum: int) -> None:
    _log.info("stopping: %s received; finishing the jobs in flight", signal.Signals(signum).name)
    stopping.set()


async def _check_store(database: Database, secrets: PushSecrets) -> None:
    """The store answers, its migrations and the job engine's tables are current, and every
    push config's secrets open with this worker's keys."""
    from looping_core.runner.internal import engine_schema  # noqa: PLC0415 - postgres extra

    def look() -> tuple[int, bool]:
        bind(database.peewee)
        pending = len(migration_status(database.peewee).pending)
        connection = database.peewee.connection()  # type: ignore[no-untyped-call]
        return pending, engine_schema(connection).current

    try:
        pending, engine_current = await database.run_alone(look)
    except Exception as exc:
        raise_one_line(exc, ServeError)
    if pending or not engine_current:
        raise ServeError(
            "the store is not up to date (core migrations or the job engine's tables); run "
            "`looping db upgrade` (or start `looping serve`) first: a worker never migrates"
        )
    try:
        await database.run_alone(check_sealed_secrets, database, secrets)
    except SecretsUnreadable as exc:
        raise ServeError(str(exc)) from None
