"""The store out of reach: which errors say so (a restarted PostgreSQL, a busy or full SQLite),
how they reach callers (`StoreUnavailable`, one line naming the cause), and the one warning an
outage logs however many jobs fail during it."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Any, NoReturn

import peewee

from looping_core import _metrics
from looping_core.errors import LoopingError

__all__ = [
    "CONNECTION_ERRORS",
    "Outage",
    "StoreError",
    "StoreUnavailable",
    "connection_problem",
    "first_line",
    "raise_one_line",
    "transient",
    "unavailable",
]

_log = logging.getLogger("looping_core.store")

CONNECTION_ERRORS = (peewee.OperationalError, peewee.InterfaceError)


class StoreError(LoopingError):
    """The store cannot be opened or migrated."""


class StoreUnavailable(StoreError):
    """The store cannot be reached for now: its server restarted or dropped the connection,
    SQLite is busy past its timeout or its disk is full. Nothing of the failed job was written
    (or, for a lost commit, it may have been: guarded writes make trying again safe). Callers
    answer "try again later"; the driver's error is `__cause__`."""

    def __init__(self, cause: BaseException) -> None:
        self.detail = first_line(cause)
        super().__init__(f"the store is unavailable: {self.detail}")


_SQLITE_TRANSIENT_NAMES = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_PROTOCOL",
)
_SQLITE_TRANSIENT = frozenset(
    code for code in (getattr(sqlite3, name, None) for name in _SQLITE_TRANSIENT_NAMES) if code
)
"""SQLite's result codes that pass (primary codes; extended ones are these plus high bits)."""


def transient(error: BaseException) -> bool:
    """Whether `error` is the store being out of reach for now rather than a fault of the job:
    any connection, operational or interface error of PostgreSQL (a restart, a failover, a
    dropped connection, a deadlock victim), through peewee or raw (the job engine defers on the
    store's connection); SQLite's busy, locked, disk full and I/O errors."""
    seen: BaseException | None = error
    for _ in range(4):  # the error, and what it was raised from (a wrapper's cause)
        if seen is None:
            return False
        if isinstance(seen, StoreUnavailable) or _psycopg_connection_error(seen):
            return True
        if isinstance(seen, CONNECTION_ERRORS):
            original = _driver_error(seen)
            if isinstance(original, sqlite3.Error):
                code = getattr(original, "sqlite_errorcode", None)
                return code is not None and (code & 0xFF) in _SQLITE_TRANSIENT
            return True  # psycopg's, through peewee: the connection, not the SQL
        seen = seen.__cause__ or seen.__context__
    return False


def _psycopg_connection_error(error: BaseException) -> bool:
    """psycopg's OperationalError or InterfaceError (by name: psycopg is an optional extra)."""
    return type(error).__module__.startswith("psycopg") and any(
        cls.__name__ in ("OperationalError", "InterfaceError") for cls in type(error).__mro__
    )


def _driver_error(error: BaseException) -> BaseException:
    """The driver's own exception behind peewee's wrapper (peewee passes it as the first
    argument and raises from within its handler)."""
    if error.args and isinstance(error.args[0], BaseException):
        return error.args[0]
    return error.__cause__ or error.__context__ or error


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def connection_problem(exc: BaseException) -> str | None:
    """One line for a store that cannot be reached (`cannot connect to the store: ...`), from
    the driver's error; `None` for any other error."""
    if isinstance(exc, StoreUnavailable):
        return f"cannot connect to the store: {exc.detail}"
    if not isinstance(exc, (*CONNECTION_ERRORS, peewee.ImproperlyConfigured)):
        return None
    return f"cannot connect to the store: {first_line(exc)}"


def raise_one_line(error: BaseException, kind: type[LoopingError] = StoreError) -> NoReturn:
    """Raise a store that cannot be reached as one line naming the cause (a `kind`, by default
    `StoreError`), not the driver's traceback; any other error as it is."""
    problem = connection_problem(error)
    if problem is None:
        raise error
    raise kind(problem) from None


def unavailable(error: BaseException | None) -> BaseException | None:
    """A transient driver error as `StoreUnavailable` (the driver's error its cause)."""
    if error is None or isinstance(error, StoreUnavailable) or not transient(error):
        return error
    unavailable = StoreUnavailable(error)
    unavailable.__cause__ = error
    return unavailable


class Outage:
    """One WARNING when the store goes out of reach after it had answered, and one line when it
    is back, however many jobs fail between the two (every store thread shares it). A store
    that never answered is its caller's to report (a server that cannot start, a CLI error)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None
        self._answered = False

    def note(self, outcomes: Sequence[tuple[Any, Any, BaseException | None]]) -> None:
        down = next((e for _, _, e in outcomes if isinstance(e, StoreUnavailable)), None)
        if down is None and self.since is None and self._answered:
            return  # the usual case, without the lock
        with self._lock:
            if down is not None:
                if self.since is None:
                    self.since = time.monotonic()
                    if self._answered:
                        _metrics.STORE_OUTAGES.inc()
                        _log.warning(
                            "%s; callers are told to try again (HTTP 503) until it is back", down
                        )
            elif any(error is None for _, _, error in outcomes):
                if self.since is not None and self._answered:
                    _log.warning(
                        "the store is available again after %.1f s",
                        time.monotonic() - self.since,
                    )
                self.since = None
                self._answered = True
