"""Turn execution and push delivery.

- `Runner`: what the edge asks of a runner (start, wait until settled, cancel, the canceled
  message), met by `LocalRunner` (turns run in the process that accepted them: the embedded
  default) and `EngineRunner` (turns are the job engine's jobs, run by any worker);
- `TurnDriver`: one task's turns from SUBMITTED to their end, which both runners (and the job
  engine's turn job) use;
- `PushDeliverer`: sends the outbox's pushes (its own loop, or one job at a time);
- `run_retention`, `keep_pruning`: `[retention]`'s pass, and its timer in the embedded mode;
- `JobEngine`, `EngineHooks`: turns and pushes as procrastinate jobs on PostgreSQL (imported on
  first use: procrastinate comes with the `postgres` extra); `apply_engine_schema` and
  `engine_schema` manage its tables, `queue_orphans` gives rows from before it their jobs.
"""

from typing import Any

from looping_core.runner._delivery import PushDeliverer
from looping_core.runner._engine_runner import EngineRunner
from looping_core.runner._local import LocalRunner
from looping_core.runner._protocol import Runner
from looping_core.runner._retention import cron_of, keep_pruning, run_retention
from looping_core.runner._turns import TurnDriver

__all__ = [
    "JOB_QUEUES",
    "EngineHooks",
    "EngineRunner",
    "EngineSchema",
    "JobEngine",
    "LocalRunner",
    "PushDeliverer",
    "Runner",
    "TurnDriver",
    "apply_engine_schema",
    "cron_of",
    "engine_schema",
    "keep_pruning",
    "queue_orphans",
    "run_retention",
]

_LAZY = {
    "JOB_QUEUES": ("looping_core.runner._engine", "QUEUES"),
    "EngineHooks": ("looping_core.runner._engine", "EngineHooks"),
    "JobEngine": ("looping_core.runner._engine", "JobEngine"),
    "EngineSchema": ("looping_core.runner._engine_schema", "EngineSchema"),
    "apply_engine_schema": ("looping_core.runner._engine_schema", "apply_engine_schema"),
    "engine_schema": ("looping_core.runner._engine_schema", "engine_schema"),
    "queue_orphans": ("looping_core.runner._engine", "queue_orphans"),
}


def __getattr__(name: str) -> Any:
    """The job engine's names, imported when first asked for (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    module, attribute = _LAZY[name]
    return getattr(importlib.import_module(module), attribute)
