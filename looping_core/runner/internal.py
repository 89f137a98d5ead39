"""The door of `looping_core.runner` for looping-core's server and CLI: every name described in
the package's docstring. Not part of the app-facing API (an app never builds a runner: `looping
serve` does): it may change with any release, and the API snapshot leaves it out.
"""

from typing import TYPE_CHECKING, Any

from looping_core.runner._delivery import PushDeliverer
from looping_core.runner._engine_runner import EngineRunner
from looping_core.runner._local import LocalRunner
from looping_core.runner._patience import OUTAGE_PATIENCE_SECONDS
from looping_core.runner._protocol import Runner
from looping_core.runner._retention import cron_of, keep_pruning, run_retention
from looping_core.runner._slots import FairSlots
from looping_core.runner._turns import TurnDriver

if TYPE_CHECKING:  # imported on first use (PEP 562, below): procrastinate is the postgres extra
    from looping_core.runner._engine import JobEngine
    from looping_core.runner._engine_jobs import QUEUES as JOB_QUEUES
    from looping_core.runner._engine_jobs import EngineHooks, queue_orphans
    from looping_core.runner._engine_schema import ADDITIONS as ENGINE_ADDITIONS
    from looping_core.runner._engine_schema import (
        EngineSchema,
        analyze_engine_tables,
        apply_engine_schema,
        engine_schema,
    )

__all__ = [
    "ENGINE_ADDITIONS",
    "JOB_QUEUES",
    "OUTAGE_PATIENCE_SECONDS",
    "EngineHooks",
    "EngineRunner",
    "EngineSchema",
    "FairSlots",
    "JobEngine",
    "LocalRunner",
    "PushDeliverer",
    "Runner",
    "TurnDriver",
    "analyze_engine_tables",
    "apply_engine_schema",
    "cron_of",
    "engine_schema",
    "keep_pruning",
    "queue_orphans",
    "run_retention",
]

_LAZY = {
    "ENGINE_ADDITIONS": ("looping_core.runner._engine_schema", "ADDITIONS"),
    "JOB_QUEUES": ("looping_core.runner._engine_jobs", "QUEUES"),
    "EngineHooks": ("looping_core.runner._engine_jobs", "EngineHooks"),
    "JobEngine": ("looping_core.runner._engine", "JobEngine"),
    "EngineSchema": ("looping_core.runner._engine_schema", "EngineSchema"),
    "analyze_engine_tables": ("looping_core.runner._engine_schema", "analyze_engine_tables"),
    "apply_engine_schema": ("looping_core.runner._engine_schema", "apply_engine_schema"),
    "engine_schema": ("looping_core.runner._engine_schema", "engine_schema"),
    "queue_orphans": ("looping_core.runner._engine_jobs", "queue_orphans"),
}


def __getattr__(name: str) -> Any:
    """The job engine's names, imported when first asked for (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    module, attribute = _LAZY[name]
    return getattr(importlib.import_module(module), attribute)
