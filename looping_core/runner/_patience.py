"""Waiting out a short store outage inside a running turn: its model calls and tools need no
store, so only its writes (and reads) wait, and the agent is not run again for an outage it
outlived."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from looping_core.store.internal import StoreUnavailable

__all__ = [
    "OUTAGE_PATIENCE_SECONDS",
    "OUTAGE_RETRY_FIRST",
    "OUTAGE_RETRY_MAX",
    "Backoff",
    "patiently",
]

OUTAGE_PATIENCE_SECONDS = 60.0
"""How long a running turn's store call is tried again while the store is out of reach,
before the turn is given up here (and taken up again when the store is back)."""
OUTAGE_RETRY_FIRST, OUTAGE_RETRY_MAX = 0.2, 1.0
"""Pauses between tries while the store is out of reach: short, so a restarted store is
noticed within a second."""

_T = TypeVar("_T")


class Backoff:
    """The growing pause between the tries of something that keeps stopping (a job worker, a
    listener): `first`, doubling up to `most`, and `first` again after a try that lasted longer
    than `most` (it had been working)."""

    def __init__(self, first: float, most: float) -> None:
        self._first, self._most = first, most
        self._next = first

    def pause(self, lasted: float) -> float:
        """The pause before the next try, after one that lasted `lasted` seconds."""
        if lasted > self._most:
            self._next = self._first
        pause, self._next = self._next, min(self._next * 2, self._most)
        return pause


async def patiently(call: Callable[[], Awaitable[_T]]) -> _T:
    """`call()`, tried again while the store is out of reach, for `OUTAGE_PATIENCE_SECONDS`;
    then its `StoreUnavailable` is raised. A try that failed wrote nothing, unless the store
    went away between its commit and the answer: a guarded write then loses the second time,
    and any other is written twice (an event, a session message), which beats running the
    turn's agent twice."""
    deadline = time.monotonic() + OUTAGE_PATIENCE_SECONDS
    delay = OUTAGE_RETRY_FIRST
    while True:
        try:
            return await call()
        except StoreUnavailable:
            if time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, OUTAGE_RETRY_MAX)
