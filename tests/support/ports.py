"""Free ports for servers a test starts, several at once: each distinct (`unused_port` called
twice may give the same port twice, since each call closes its socket before the next)."""

from __future__ import annotations

import contextlib
import socket

__all__ = ["unused_ports"]


def unused_ports(count: int) -> list[int]:
    """`count` distinct free ports on 127.0.0.1, found with their sockets all open at once."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for held in sockets:
            held.bind(("127.0.0.1", 0))
        return [held.getsockname()[1] for held in sockets]
