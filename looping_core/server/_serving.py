"""`looping serve`: one server process, or a supervisor and `[server] workers` of them.

With several workers the supervisor checks everything a server checks, prepares the store once
(migrations, plugin stores, turns left by slots that no longer exist), makes sure nothing else
listens on the port, and forks the workers. Each listens with SO_REUSEPORT, so the kernel spreads
connections over them evenly; they share the store, and worker `k` runs the turns it accepted and
delivers their pushes (slot `k` owns those rows), so no two processes touch one turn. A worker that
dies is replaced in its slot, and the replacement recovers the slot's turns and pushes as a
restarted server would. SIGTERM or SIGINT stops the workers, then the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from types import FrameType
from typing import NoReturn

import attrs
from aiohttp import web

from looping_core.config import Config
from looping_core.errors import LoopingError
from looping_core.plugins import PluginHost
from looping_core.server._app import create_app, prepare_store
from looping_core.server._listening import (
    KEEPALIVE_TIMEOUT_SECONDS,
    SHUTDOWN_TIMEOUT_SECONDS,
    port_problem,
)
from looping_core.server._requests import AccessLogger
from looping_core.server._services import SERVICES
from looping_core.server._startup import assemble
from looping_core.server._telemetry import (
    METRICS_PATH,
    MetricsSetup,
    export_traces,
    listen_for_scrapes,
    prepare_metrics,
    telemetry_problems,
)

__all__ = ["Listener", "ServeError", "event_loop_factory", "listen", "serve"]

_log = logging.getLogger("looping_core.server")

RESTART_LIMIT = 5
"""A slot whose worker dies this often within `RESTART_WINDOW_SECONDS` stops the server."""
RESTART_WINDOW_SECONDS = 60.0
SUPERVISOR_POLL_SECONDS = 0.5
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class ServeError(LoopingError):
    """The server cannot listen, or its workers keep dying."""


def serve(config: Config, plugins: PluginHost, *, workers: int | None = None) -> None:
    """Serve until SIGTERM or SIGINT; `workers` overrides `[server] workers`."""
    count = workers if workers is not None else config.server.workers
    new_loop = event_loop_factory(config.server.event_loop)
    observability = config.observability
    problems = telemetry_problems(observability)
    if problems:
        raise ServeError("; ".join(problems))
    if count > 1 and not hasattr(os, "fork"):
        raise ServeError(
            f"{count} workers need fork(), which this system lacks; set [server] workers = 1"
        )
    _check_port_free(config.server.host, config.server.port)
    if config.server.grpc_port:
        _check_port_free(config.server.host, config.server.grpc_port)
    if observability.metrics_port:
        _check_port_free(observability.metrics_host, observability.metrics_port)
    metrics = prepare_metrics(observability)  # before anything records, or forks
    try:
        startup = assemble(config, plugins=plugins)  # every check a worker makes, first
        if count == 1:
            app = create_app(config, startup=startup)
            # Announced once it is up: the store opened and migrated, the port listening.
            up = functools.partial(_announce, config, count, new_loop)
            _run_app(app, config, new_loop(), worker=False, on_up=up, metrics=metrics)
            return
        prepare_store(startup, count)
        _announce(config, count, new_loop)
        _Supervisor(config, plugins, count, new_loop, metrics).run()
    finally:
        if metrics is not None:
            metrics.remove()


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """How to make the server's event loop for `[server] event_loop`.

    uvloop runs aiohttp's I/O in C (libuv); on a loaded server it saves about a sixth of the CPU
    time per request. `auto` takes it when it is installed (the `uvloop` extra).
    """
    if choice == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop  # noqa: PLC0415 - optional: the `uvloop` extra
    except ImportError:
        if choice == "uvloop":
            raise ServeError(
                '[server] event_loop = "uvloop" needs the uvloop package;'
                " install it with: pip install 'looping-core[uvloop]'"
            ) from None
        return asyncio.new_event_loop
    new_event_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return new_event_loop


def _announce(
    config: Config, workers: int, new_loop: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    server = config.server
    processes = f" with {workers} workers" if workers > 1 else ""
    loop = "asyncio" if new_loop is asyncio.new_event_loop else "uvloop"
    _log.info(
        "serving %s on %s:%d%s (event loop: %s)",
        server.endpoint_url, server.host, server.port, processes, loop,
    )  # fmt: skip
    observability = config.observability
    if observability.metrics_port:
        _log.info(
            "metrics on http://%s:%d%s",
            observability.metrics_host, observability.metrics_port, METRICS_PATH,
        )  # fmt: skip


def _check_port_free(host: str, port: int) -> None:
    problem = port_problem(host, port)
    if problem is not None:
        raise ServeError(problem)


class _Supervisor:
    def __init__(
        self,
        config: Config,
        plugins: PluginHost,
        workers: int,
        new_loop: Callable[[], asyncio.AbstractEventLoop],
        metrics: MetricsSetup | None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._plugins = plugins
        self._workers = workers
        self._new_loop = new_loop
        self._children: dict[int, int] = {}  # pid -> slot
        self._deaths: dict[int, deque[float]] = {slot: deque() for slot in range(workers)}
        self._stopping = False

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for slot in range(self._workers):
            self._start(slot)
        failure: str | None = None
        while self._children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in self._children:
                continue
            slot = self._children.pop(pid)
            if self._metrics is not None:
                self._metrics.process_gone(pid)
            if self._stopping:
                continue
            if self._dies_too_often(slot):
                failure = (
                    f"worker {slot} died {RESTART_LIMIT} times within "
                    f"{RESTART_WINDOW_SECONDS:.0f} s (last: pid {pid} {_describe(status)}); "
                    "stopping the server, see the log above"
                )
                _log.error("%s", failure)
                self._stop(signal.SIGTERM, None)
                continue
            _log.warning("worker %d (pid %d) %s; starting a new one", slot, pid, _describe(status))
            self._start(slot)
        if failure is not None:
            raise ServeError(failure)
        _log.info("every worker has stopped")

    def _start(self, slot: int) -> None:
        supervisor = os.getpid()
        # A stop signal arriving between the fork and the new worker's registration would miss
        # it and leave it running: hold stop signals until both processes are ready for them.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            if self._stopping:  # a stop came in since the caller looked
                return
            pid = os.fork()
            if pid == 0:
                self._serve_as_worker(supervisor, slot)  # never returns
            self._children[pid] = slot
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)

    def _serve_as_worker(self, supervisor: int, slot: int) -> NoReturn:
        """The worker: serve, and never return into the supervisor's stack."""
        code = 1
        try:
            # Only the supervisor stops workers, with one SIGTERM each: a terminal's Ctrl-C
            # reaches the whole process group, and a second signal would cut a graceful
            # shutdown short.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            app = create_app(self._config, plugins=self._plugins, worker=slot)
            app.cleanup_ctx.append(_worker_lifecycle(supervisor, slot))
            _log.info("worker %d serving (pid %d)", slot, os.getpid())
            # The loop is made after the fork: loops never cross one.
            _run_app(app, self._config, self._new_loop(), worker=True, metrics=self._metrics)
            code = 0
        except BaseException:
            _log.exception("worker %d failed", slot)
        finally:
            logging.shutdown()
            os._exit(code)

    def _dies_too_often(self, slot: int) -> bool:
        now = time.monotonic()
        deaths = self._deaths[slot]
        deaths.append(now)
        while deaths and now - deaths[0] > RESTART_WINDOW_SECONDS:
            deaths.popleft()
        return len(deaths) >= RESTART_LIMIT

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True
        for pid in self._children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def _worker_lifecycle(
    supervisor: int, slot: int
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A worker's stops: the first SIGTERM shuts it down gracefully (later ones are ignored),
    and so does losing its supervisor (killed with SIGKILL, say), since nothing would then
    replace it, stop it or recover its slot; the next server start does all of that."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()

        def stop() -> None:
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            raise web.GracefulExit()  # out of the loop: aiohttp's graceful shutdown

        async def watch_supervisor() -> None:
            while os.getppid() == supervisor:
                await asyncio.sleep(SUPERVISOR_POLL_SECONDS)
            _log.warning("worker %d: the supervisor is gone; stopping", slot)
            os.kill(os.getpid(), signal.SIGTERM)

        loop.add_signal_handler(signal.SIGTERM, stop)
        watcher = asyncio.create_task(watch_supervisor())
        yield
        watcher.cancel()

    return lifecycle


LINGERING_SECONDS = 2.0
"""After answering a request whose body was not read (a 408, a 413), how long unread body
bytes are drained before the connection is closed (so the client sees the answer, not a reset)."""


@attrs.frozen
class Listener:
    """An application listening through its connection guard; `cleanup()` stops it gracefully
    (no new connections, the requests in flight finish, then the app's cleanup)."""

    runner: web.AppRunner
    server: asyncio.Server

    @property
    def port(self) -> int:
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def cleanup(self) -> None:
        self.server.close()
        await self.runner.cleanup()


async def listen(
    app: web.Application,
    host: str,
    port: int,
    *,
    reuse_port: bool = False,
    access_log: logging.Logger | None = None,
    shutdown_timeout: float = SHUTDOWN_TIMEOUT_SECONDS,
) -> Listener:
    """Start `app` (its startup runs first) and listen on `host:port` through the app's
    `ConnectionGuard`: header deadlines and the connection cap apply to every connection."""
    runner = web.AppRunner(
        app,
        access_log=access_log,
        access_log_class=AccessLogger,
        keepalive_timeout=KEEPALIVE_TIMEOUT_SECONDS,
        lingering_time=LINGERING_SECONDS,
        shutdown_timeout=shutdown_timeout,
    )
    await runner.setup()
    try:
        assert runner.server is not None  # set by setup()
        factory = app[SERVICES].guard.protocol_factory(runner.server)
        server = await asyncio.get_running_loop().create_server(
            factory, host, port, reuse_address=True, reuse_port=reuse_port or None, backlog=128
        )
    except BaseException:
        await runner.cleanup()
        raise
    return Listener(runner, server)


def _run_app(
    app: web.Application,
    config: Config,
    loop: asyncio.AbstractEventLoop,
    *,
    worker: bool,
    on_up: Callable[[], None] = lambda: None,
    metrics: MetricsSetup | None = None,
) -> None:
    """Serve `app` until stopped (`on_up` once it listens). A worker shares the port
    (SO_REUSEPORT) and leaves stop signals to `_worker_lifecycle`; a single server stops
    gracefully on SIGINT or SIGTERM."""
    asyncio.set_event_loop(loop)
    stop_traces = export_traces(config.observability)  # in this process: after any fork
    main = loop.create_task(_serve(app, config, worker=worker, on_up=on_up, metrics=metrics))
    try:
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        if not main.done():
            main.cancel()  # the graceful part: `Listener.cleanup` runs in `_serve`
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(main)
        _cancel_remaining(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        if stop_traces is not None:
            stop_traces()  # the spans still batched are sent


async def _serve(
    app: web.Application,
    config: Config,
    *,
    worker: bool,
    on_up: Callable[[], None],
    metrics: MetricsSetup | None,
) -> None:
    loop = asyncio.get_running_loop()
    if not worker:
        for signum in _STOP_SIGNALS:
            loop.add_signal_handler(signum, _graceful_exit, signum)
    access_log = logging.getLogger("aiohttp.access") if config.server.access_log else None
    listener = await listen(
        app,
        config.server.host,
        config.server.port,
        reuse_port=worker,
        access_log=access_log,
    )
    scrapes = None
    try:
        if metrics is not None:
            observability = config.observability
            scrapes = await listen_for_scrapes(
                metrics, observability.metrics_host, observability.metrics_port, reuse_port=worker
            )
        on_up()
        _freeze_what_startup_built()
        await asyncio.Event().wait()  # until stopped
    finally:
        if scrapes is not None:
            await scrapes.cleanup()
        await listener.cleanup()


def _freeze_what_startup_built() -> None:
    """Keep what startup built (modules, the app, the store, the plugins) out of the garbage
    collector's passes: it lives as long as the server, and a full pass over it, hundreds of
    thousands of objects, would otherwise run every few thousand requests on the event loop.
    Its garbage is collected first, so none of it is kept for good."""
    gc.collect()
    gc.freeze()


def _graceful_exit(signum: int) -> None:
    _log.info(
        "stopping: %s received; finishing the requests in flight", signal.Signals(signum).name
    )
    raise web.GracefulExit()


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with {os.waitstatus_to_exitcode(status)}"
