"""The machine-readable output of a benchmark: what bench/charts.py draws the docs' charts from.

One JSON file per run: which benchmark, when, on how many CPUs, with which command, and its
medians as `series` (a name such as "looping-core, 1 worker") -> `points` (a concurrency level,
or a shape of load) -> measurements (`rps`, `cpu_ms`, ...). The figures are the ones the script
printed; nothing is computed here.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

Series = Mapping[str, Mapping[Any, Mapping[str, float]]]


def write_results(path: Path, benchmark: str, series: Series, **extra: Any) -> None:
    rounded = {
        name: {str(x): {key: round(v, 3) for key, v in m.items()} for x, m in points.items()}
        for name, points in series.items()
    }
    document = {
        "benchmark": benchmark,
        "date": datetime.date.today().isoformat(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "command": " ".join(["python", *sys.argv]),
        **extra,
        "series": rounded,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nresults written to {path}", flush=True)
