"""What `looping serve` sets up for operators beside the edge: the metrics listener and the
export of traces.

Metrics: `prepare_metrics` picks the directory where every server process writes its values
(`$PROMETHEUS_MULTIPROC_DIR` when the operator set it, emptied first; else a new temporary one,
removed at exit) and enables recording, before any worker is forked. Each serving process then
listens on `[observability] metrics_port` too (workers share it with SO_REUSEPORT, as they share
the A2A port) and answers `GET /metrics` with every process's values, so whichever worker a
scrape reaches, it sees the whole server.

Traces: with `[observability] traces_endpoint`, each serving process sends its spans there over
OTLP/HTTP in batches, and flushes them as it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import attrs
from aiohttp import web

from looping_core import _metrics
from looping_core.config import ObservabilityConfig

__all__ = [
    "METRICS_PATH",
    "MetricsSetup",
    "export_traces",
    "listen_for_scrapes",
    "prepare_metrics",
    "telemetry_problems",
]

_log = logging.getLogger("looping_core.server")

METRICS_PATH = "/metrics"
OTEL_HINT = "pip install 'looping-core[otel]'"
_OTLP_EXPORTER = "opentelemetry.exporter.otlp.proto.http"


def telemetry_problems(observability: ObservabilityConfig) -> list[str]:
    """What keeps the configured metrics or traces from working: a package not installed."""
    problems = []
    if observability.metrics_port and not _installed("prometheus_client"):
        problems.append(
            "metrics_port needs prometheus-client, which is not installed; install it with "
            f"{_metrics.INSTALL_HINT} @ $.observability.metrics_port"
        )
    if observability.traces_endpoint and not (
        _installed("opentelemetry.sdk") and _installed(_OTLP_EXPORTER)
    ):
        problems.append(
            "traces_endpoint needs the OpenTelemetry SDK and its OTLP exporter, which are not "
            f"installed; install them with {OTEL_HINT} @ $.observability.traces_endpoint"
        )
    return problems


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


@attrs.frozen
class MetricsSetup:
    directory: str
    owned: bool
    """Made by this server (removed when it stops), not given by the operator."""

    def process_gone(self, pid: int) -> None:
        """A worker exited: its gauges stop counting."""
        with contextlib.suppress(OSError):
            _metrics.process_gone(pid, self.directory)

    def remove(self) -> None:
        if self.owned:
            shutil.rmtree(self.directory, ignore_errors=True)


def prepare_metrics(observability: ObservabilityConfig) -> MetricsSetup | None:
    """Enable metrics for this server's processes (`None` when `metrics_port` is 0)."""
    if not observability.metrics_port:
        return None
    given = os.environ.get(_metrics.MULTIPROCESS_ENV)
    if given:
        # The files of a previous run would add its counts to this one's.
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink()
        setup = MetricsSetup(str(directory), owned=False)
    else:
        setup = MetricsSetup(tempfile.mkdtemp(prefix="looping-metrics-"), owned=True)
    _metrics.enable(setup.directory)
    return setup


def metrics_app(directory: str) -> web.Application:
    """`GET /metrics`: the text exposition of every process's values."""

    async def scrape(request: web.Request) -> web.Response:
        # Reading the processes' files is blocking work: off the event loop.
        body, content_type = await asyncio.get_running_loop().run_in_executor(
            None, _metrics.exposition, directory
        )
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get(METRICS_PATH, scrape)
    return app


async def listen_for_scrapes(
    setup: MetricsSetup, host: str, port: int, *, reuse_port: bool
) -> web.AppRunner:
    """Serve `/metrics` on `host:port` until the returned runner is cleaned up."""
    runner = web.AppRunner(metrics_app(setup.directory), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def export_traces(observability: ObservabilityConfig) -> Callable[[], None] | None:
    """Send this process's spans to `traces_endpoint`; returns what flushes and stops it
    (`None` when no endpoint is set)."""
    if not observability.traces_endpoint:
        return None
    # Optional: the `otel` extra (`telemetry_problems` said so before the server started).
    from opentelemetry import trace  # noqa: PLC0415
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    provider = TracerProvider(
        resource=Resource.create({"service.name": observability.service_name})
    )
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=observability.traces_endpoint))
    )
    trace.set_tracer_provider(provider)
    _log.info("sending traces to %s", observability.traces_endpoint)
    return provider.shutdown
