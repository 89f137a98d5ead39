"""`looping serve` under cProfile, to see where the server's CPU goes (nothing of it is in
looping-core; cProfile slows every call, so its figures attribute, they do not measure).

    python bench/profiled_serve.py <stats file> serve --config looping.toml

The stats are written when the server stops (bench/send_message.py --profile stops it with
SIGTERM, a graceful shutdown); read them with `python -m pstats <stats file>`. One worker
only: forked workers are not profiled.
"""

from __future__ import annotations

import cProfile
import sys

from looping_core.cli import main

if __name__ == "__main__":
    stats = sys.argv[1]
    sys.argv = ["looping", *sys.argv[2:]]
    profile = cProfile.Profile()
    profile.enable()
    try:
        main()
    finally:
        profile.disable()
        profile.dump_stats(stats)
