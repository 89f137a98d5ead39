"""Micro benchmark: what making every log record safe costs (`looping_core._logs`).

    python bench/log_records.py [--records 100000]

Formats access-log-like records (the hottest line: one per request, with its fields) into
/dev/null through the handler `looping serve` installs, in both formats, with and without the
`_Safe` filter (escaping control characters, capping values), and prints microseconds per
record. Numbers only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

from looping_core import _logs


def per_record(records: int, log_format: str, *, safe: bool) -> float:
    _logs.configure("info", log_format)
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(open(os.devnull, "w"))  # noqa: SIM115 - closed with the handler
    if not safe:
        for kept in [f for f in handler.filters if isinstance(f, _logs._Safe)]:
            handler.removeFilter(kept)
    logger = logging.getLogger("aiohttp.access")
    fields = {"remote": "127.0.0.1", "method": "POST", "path": "/a2a", "status": 200,
              "bytes": 751, "duration_ms": 6.0}  # fmt: skip
    with _logs.bound(request_id="4a8cdc7721164a0c9d2b1f0e3c5a6b7d", tenant="bob", subject="s"):
        began = time.perf_counter()
        for _ in range(records):
            logger.info('%s "%s %s" %d %d %.2fms', "127.0.0.1", "POST", "/a2a", 200, 751, 6.0,
                        extra=fields)  # fmt: skip
        elapsed = time.perf_counter() - began
    handler.close()
    return elapsed / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    records = parser.parse_args().records
    for log_format in ("text", "json"):
        plain = per_record(records, log_format, safe=False)
        safe = per_record(records, log_format, safe=True)
        print(f"{log_format:5} {plain:6.2f} us/record without _Safe, {safe:6.2f} us with"
              f" (+{safe - plain:.2f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
