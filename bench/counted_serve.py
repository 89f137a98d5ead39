"""`looping serve`, counting the SQL statements its SQLite connections run (the benchmark's
statement counter; nothing of it is in looping-core).

    python bench/counted_serve.py <file> serve --config looping.toml

Every statement SQLite runs (BEGIN, SAVEPOINT, COMMIT included) is counted by its first word
(`INSERT`, `UPDATE`, ...). On SIGUSR1 each process (the supervisor and every forked worker)
writes its counts to `<file>.<pid>` as JSON; bench/send_message.py signals before and after a
level and sums the differences.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sqlite3
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


def counting_hooks(original: Any) -> Any:
    def add_conn_hooks(self: peewee.SqliteDatabase, conn: sqlite3.Connection) -> None:
        original(self, conn)
        conn.set_trace_callback(count)

    return add_conn_hooks


def dump(target: Path) -> Any:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        path = target.with_name(f"{target.name}.{os.getpid()}")
        path.write_text(json.dumps(dict(COUNTS)))

    return on_signal


if __name__ == "__main__":
    target = Path(sys.argv[1])
    peewee.SqliteDatabase._add_conn_hooks = counting_hooks(  # type: ignore[method-assign]
        peewee.SqliteDatabase._add_conn_hooks
    )
    signal.signal(signal.SIGUSR1, dump(target))
    main(args=sys.argv[2:], prog_name="looping")
