"""Free ports for the servers a test starts as processes of their own. A port is chosen here,
then bound by the server a moment (a process start) later; meanwhile nothing else may be given
it. So the ports come from below the kernel's ephemeral range (it never hands those out for
`bind(0)` or a connection), from a slice of their own per pytest-xdist process, and each at
most once per process. (aiohttp's `unused_port` asks the kernel: another test process's server
could be given the same port in between, and answer in place of the one started.)"""

from __future__ import annotations

import os
import socket

__all__ = ["unused_port", "unused_ports"]

FIRST_PORT, LAST_PORT = 20000, 32000
"""The ports handed out: below Linux's ephemeral range (32768-60999 by default)."""

_handed: set[int] = set()


def _slice() -> range:
    """This test process's ports: one slice per pytest-xdist worker (all of them without one)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    span = (LAST_PORT - FIRST_PORT) // max(count, 1)
    start = FIRST_PORT + (index % max(count, 1)) * span
    return range(start, start + span)


def unused_port() -> int:
    """A free port on 127.0.0.1 that this process has not handed out before."""
    for port in _slice():
        if port in _handed:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free port left in {_slice()}")


def unused_ports(count: int) -> list[int]:
    """`count` distinct free ports on 127.0.0.1."""
    return [unused_port() for _ in range(count)]
