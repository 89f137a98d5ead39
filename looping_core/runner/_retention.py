"""Running `[retention]`: one pass (`run_retention`, also `looping db prune`), and a timer for
the embedded mode (`keep_pruning`); the job engine runs the same pass as a periodic job.

A pass that deletes anything says what in one INFO line and in `looping_retention_deleted`;
a store out of reach skips the pass (the next one goes on).
"""

from __future__ import annotations

import asyncio
import logging

from looping_core import _metrics
from looping_core.config import RetentionConfig
from looping_core.store.internal import (
    Database,
    PruneCounts,
    RetentionPolicy,
    StoreUnavailable,
    prune,
)

__all__ = ["cron_of", "keep_pruning", "run_retention"]

_log = logging.getLogger("looping_core.runner")


def policy_of(config: RetentionConfig) -> RetentionPolicy:
    return RetentionPolicy(
        finished_after=config.finished_after_seconds,
        events_after=config.events_after_seconds,
        delivered_after=config.delivered_pushes_after_seconds,
    )


async def run_retention(database: Database, config: RetentionConfig) -> PruneCounts:
    """One pass: delete what has been kept long enough; what it deleted."""
    counts = await prune(database, policy_of(config))
    for kind in ("tasks", "sessions", "events", "pushes"):
        if amount := getattr(counts, kind):
            _metrics.RETENTION_DELETED.inc(amount, kind=kind)
    if counts.total:
        _log.info(
            "retention: deleted %d ended tasks, %d sessions, %d events and %d pushes",
            counts.tasks, counts.sessions, counts.events, counts.pushes,
        )  # fmt: skip
    return counts


async def keep_pruning(database: Database, config: RetentionConfig) -> None:
    """A pass every `interval_seconds`, the first one interval after the start, until
    cancelled (embedded mode)."""
    while True:
        await asyncio.sleep(config.interval_seconds)
        try:
            await run_retention(database, config)
        except StoreUnavailable:
            continue  # the store said so; the next pass goes on
        except Exception:
            _log.exception("retention pass failed; trying again at the next interval")


def cron_of(interval_seconds: int) -> str:
    """`interval_seconds` (an entry of `RETENTION_INTERVALS`) as a cron line."""
    minutes = interval_seconds // 60
    if minutes < 60:
        return f"*/{minutes} * * * *"
    hours = minutes // 60
    return "0 0 * * *" if hours == 24 else f"0 */{hours} * * *"
