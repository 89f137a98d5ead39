"""`looping serve` under cProfile, to see where the server's CPU goes (nothing of it is in
looping-core; cProfile slows every call, so its figures attribute, they do not measure).

    python bench/profiled_serve.py <stats file> serve --config looping.toml

The event loop's thread and every thread started after it (the store's thread among them) are
profiled, each on its own: the stats are written when the server stops (bench/send_message.py
--profile stops it with SIGTERM, a graceful shutdown), the loop's to `<stats file>` and each
other thread's to `<stats file>.<thread name>`; read them with `python -m pstats`. One worker
only: forked workers are not profiled.
"""

from __future__ import annotations

import cProfile
import sys
import threading
from typing import Any

from looping_core.cli import main

_run = threading.Thread.run


def _profiled_run(thread: threading.Thread, stats: str) -> None:
    profile = cProfile.Profile()
    profile.enable()
    try:
        _run(thread)
    finally:
        profile.disable()
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in thread.name)
        profile.dump_stats(f"{stats}.{name}")


if __name__ == "__main__":
    stats = sys.argv[1]
    sys.argv = ["looping", *sys.argv[2:]]

    def run(self: threading.Thread, *_: Any) -> None:
        _profiled_run(self, stats)

    threading.Thread.run = run  # type: ignore[method-assign]
    profile = cProfile.Profile()
    profile.enable()
    try:
        main()
    finally:
        profile.disable()
        profile.dump_stats(stats)
