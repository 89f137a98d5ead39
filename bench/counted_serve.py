"""`looping serve`, counting the SQL statements its SQLite connections run (the benchmark's
statement counter; nothing of it is in looping-core).

    python bench/counted_serve.py <file> serve --config looping.toml

Every statement peewee sends to SQLite (BEGIN, SAVEPOINT, COMMIT included; looping-core sends
all of its statements through peewee) is counted by its first word (`INSERT`, `UPDATE`, ...), in
Python before the statement runs. Not with SQLite's trace callback: that one runs inside the
statement, on the store's thread, which must then take the GIL back from the event loop for
every statement, and the benchmark would measure its own counter in the server's CPU.

On SIGUSR1 each process (the supervisor and every forked worker) writes its counts to
`<file>.<pid>` as JSON; bench/send_message.py signals before and after a level and sums the
differences.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import peewee

from looping_core.cli import main

COUNTS: collections.Counter[str] = collections.Counter()


def count(statement: str) -> None:
    words = statement.lstrip().split(None, 1)
    COUNTS[words[0].upper() if words else "?"] += 1


def counting(original: Any, statement: str | None = None) -> Any:
    """`original` (a peewee.Database method), counting the statement it sends: its first
    argument's, or `statement` (BEGIN, COMMIT, ROLLBACK)."""

    def counted(self: peewee.Database, *args: Any, **kwargs: Any) -> Any:
        count(statement or args[0])
        return original(self, *args, **kwargs)

    return counted


def dump(target: Path) -> Any:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        path = target.with_name(f"{target.name}.{os.getpid()}")
        path.write_text(json.dumps(dict(COUNTS)))

    return on_signal


if __name__ == "__main__":
    target = Path(sys.argv[1])
    sqlite = peewee.SqliteDatabase
    sqlite.execute_sql = counting(sqlite.execute_sql)  # type: ignore[method-assign]
    sqlite.begin = counting(sqlite.begin, "BEGIN")  # type: ignore[method-assign]
    sqlite.commit = counting(sqlite.commit, "COMMIT")  # type: ignore[method-assign]
    sqlite.rollback = counting(sqlite.rollback, "ROLLBACK")  # type: ignore[method-assign]
    signal.signal(signal.SIGUSR1, dump(target))
    main(args=sys.argv[2:], prog_name="looping")
