"""What the server counts: every metric in one catalog, exposed to Prometheus across processes.

Each metric is declared here once, so an operator reads one list (docs/operating.md's, which a
test compares with this one). Recording is a no-op until `enable()`: one attribute test per call, so
a server without `[observability] metrics_port`, or without prometheus-client installed, pays
nothing for it.

`enable(directory)` puts prometheus-client in its multiprocess mode (each process writes its
values to memory-mapped files in `directory`; a scrape adds them up) and only then makes the
real metrics. `looping serve` enables it before forking its workers, so the values of every
worker, live or dead, are in one exposition: counters keep what dead workers counted, gauges
count live processes only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from looping_core.errors import LoopingError

__all__ = [
    "CATALOG",
    "Counter",
    "Gauge",
    "Histogram",
    "MetricsUnavailable",
    "enable",
    "enabled",
    "exposition",
    "process_gone",
]

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
INSTALL_HINT = "pip install 'looping-core[prometheus]'"

CATALOG: list[_Metric] = []
"""Every metric, in the order declared."""


class MetricsUnavailable(LoopingError):
    """Metrics were asked for, and prometheus-client is not installed."""


class _Metric:
    kind = ""

    def __init__(
        self, name: str, documentation: str, labels: Sequence[str] = (), **options: Any
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self._options = options
        self._real: Any = None
        CATALOG.append(self)

    def _make(self, prometheus: Any) -> None:
        factory = getattr(prometheus, type(self).__name__)
        self._real = factory(
            self.name, self.documentation, self.labels, registry=None, **self._options
        )

    def _child(self, labels: dict[str, str]) -> Any:
        return self._real.labels(**labels) if labels else self._real


class Counter(_Metric):
    """Only goes up (exposed as `<name>_total`)."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if self._real is not None:
            self._child(labels).inc(amount)


class Histogram(_Metric):
    """A distribution (`_bucket`, `_sum`, `_count`)."""

    kind = "histogram"

    def observe(self, value: float, **labels: str) -> None:
        if self._real is not None:
            self._child(labels).observe(value)


class Gauge(_Metric):
    """A level that goes up and down; `multiprocess_mode` says how processes' values combine."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        if self._real is not None:
            self._child(labels).set(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if self._real is not None:
            self._child(labels).inc(amount)

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        if self._real is not None:
            self._child(labels).dec(amount)


def enable(directory: str) -> None:
    """Record from now on, in multiprocess mode, into `directory` (which must exist)."""
    os.environ[MULTIPROCESS_ENV] = directory
    try:
        import prometheus_client  # noqa: PLC0415 - optional: the `prometheus` extra
        from prometheus_client import values  # noqa: PLC0415
    except ImportError:
        raise MetricsUnavailable(
            f"[observability] metrics_port needs prometheus-client; install it with {INSTALL_HINT}"
        ) from None
    # The client picks its value store when it is first imported; something may have imported
    # it before the directory was known. Pick again, before any of our metrics exists.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    for metric in CATALOG:
        metric._make(prometheus_client)


def enabled() -> bool:
    return bool(CATALOG) and CATALOG[0]._real is not None


def exposition(directory: str) -> tuple[bytes, str]:
    """The text exposition of every process's values in `directory`, and its content type."""
    from prometheus_client import (  # noqa: PLC0415
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        generate_latest,
        multiprocess,
    )

    registry = CollectorRegistry(auto_describe=False)
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST


def process_gone(pid: int, directory: str) -> None:
    """A worker exited: its live gauges stop counting (its counters stay)."""
    from prometheus_client import multiprocess  # noqa: PLC0415

    multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_TURN_SECONDS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)

# -- the edge ---------------------------------------------------------------------------------
REQUESTS = Counter(
    "looping_requests",
    "A2A calls answered, by binding, method and outcome (ok, or the error's reason).",
    ("binding", "method", "outcome"),
)
REQUEST_SECONDS = Histogram(
    "looping_request_duration_seconds",
    "Time to answer an A2A call (to the first event, for a stream), by binding and method.",
    ("binding", "method"),
    buckets=_SECONDS,
)
TOKEN_REFUSALS = Counter(
    "looping_token_refusals",
    "Gateway tokens refused, by the check that refused them.",
    ("check",),
)
JWKS_FETCHES = Counter(
    "looping_jwks_fetches",
    "Fetches of a gateway's key set, by outcome (ok, failed).",
    ("outcome",),
)
JWKS_CACHE_HITS = Counter(
    "looping_jwks_cache_hits", "Token keys found in the key-set cache, with no fetch."
)
STREAMS_OPEN = Gauge(
    "looping_streams_open",
    "Streams (SendStreamingMessage, SubscribeToTask) open now.",
    multiprocess_mode="livesum",
)
STREAM_DROPS = Counter(
    "looping_stream_drops",
    "Streams closed because their client read too slowly (it may resume with Last-Event-ID).",
)
STREAM_DELAY = Histogram(
    "looping_stream_delay_seconds",
    "From an event's writing in the store to its being sent on a stream (events replayed to a"
    " stream resuming with Last-Event-ID included).",
    buckets=_SECONDS,
)
# -- turns ------------------------------------------------------------------------------------
TURNS = Counter(
    "looping_turns",
    "Turns ended, by outcome (completed, failed, rejected, input_required, auth_required,"
    " canceled).",
    ("outcome",),
)
TURN_SECONDS = Histogram(
    "looping_turn_duration_seconds",
    "A turn's time from taking a runner slot to writing its end, by outcome.",
    ("outcome",),
    buckets=_TURN_SECONDS,
)
TURNS_WAITING = Gauge(
    "looping_turns_waiting",
    "Turns accepted and waiting for a runner slot ([runner] concurrency).",
    multiprocess_mode="livesum",
)
TURNS_RUNNING = Gauge(
    "looping_turns_running", "Turns holding a runner slot now.", multiprocess_mode="livesum"
)
# -- pushes -----------------------------------------------------------------------------------
PUSH_ATTEMPTS = Counter(
    "looping_push_attempts",
    "Push delivery attempts, by result (2xx, 3xx, 4xx, 5xx, or error: no HTTP answer).",
    ("result",),
)
PUSH_DELIVERIES = Counter(
    "looping_push_deliveries",
    "Pushes done with, by outcome (delivered, failed: attempts used up or undeliverable,"
    " expired: too old to retry).",
    ("outcome",),
)
PUSH_OLDEST_PENDING = Gauge(
    "looping_push_oldest_pending_seconds",
    "Age of the oldest push still waiting to be delivered (0 when none is).",
    multiprocess_mode="livemax",
)
# -- the store --------------------------------------------------------------------------------
STORE_BATCH_JOBS = Histogram(
    "looping_store_batch_jobs",
    "Store jobs committed in one transaction (SQLite group commit; 1 on PostgreSQL).",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
STORE_COMMIT_SECONDS = Histogram(
    "looping_store_commit_seconds",
    "Time to run and commit one store transaction (a batch).",
    buckets=_SECONDS,
)
RETENTION_DELETED = Counter(
    "looping_retention_deleted",
    "Rows [retention] deleted, by kind (tasks: ended tasks with their messages, artifacts,"
    " events and pushes; sessions; events; pushes).",
    ("kind",),
)
STORE_OUTAGES = Counter(
    "looping_store_outages",
    "Times this process found the store out of reach (a restart, a lost connection, SQLite"
    " busy or disk full) after it had answered.",
)
# -- models and tools -------------------------------------------------------------------------
MODEL_CALLS = Counter(
    "looping_model_calls",
    "Model calls, by provider, model and outcome (ok, error).",
    ("provider", "model", "outcome"),
)
MODEL_TOKENS = Counter(
    "looping_model_tokens",
    "Tokens the models reported, by provider, model and kind (input, output).",
    ("provider", "model", "kind"),
)
MODEL_COST = Counter(
    "looping_model_cost",
    "What the model calls cost by the deployment's [prices], by tenant, provider and model"
    " (the prices' currency; calls of unpriced models are not counted).",
    ("tenant", "provider", "model"),
)
MODEL_FALLBACKS = Counter(
    "looping_model_fallbacks",
    "Calls passed on to the next model after this provider and model failed.",
    ("provider", "model"),
)
# OpenTelemetry's GenAI client metrics, as a Prometheus exporter names them (dots become
# underscores, the unit a suffix), with the conventions' buckets.
_GENAI = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model")
GENAI_TOKEN_USAGE = Histogram(
    "gen_ai_client_token_usage",
    "gen_ai.client.token.usage: tokens a model call used, by operation, provider, model and"
    " token type (input, output).",
    (*_GENAI, "gen_ai_token_type"),
    buckets=tuple(4.0**n for n in range(14)),
)
GENAI_OPERATION_SECONDS = Histogram(
    "gen_ai_client_operation_duration_seconds",
    "gen_ai.client.operation.duration: how long a model call took, by operation, provider,"
    " model and error type (empty when it answered).",
    (*_GENAI, "error_type"),
    buckets=tuple(0.01 * 2.0**n for n in range(14)),
)
TOOL_CALLS = Counter(
    "looping_tool_calls",
    "Tool calls, by tool and outcome (ok, error: the tool raised or its arguments were bad).",
    ("tool", "outcome"),
)
