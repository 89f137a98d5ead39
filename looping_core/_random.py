"""Random ids for every request and turn, without a system call each.

`os.urandom` (behind `uuid.uuid4`) is one `getrandom` call per id, and CPython lets go of the
GIL around it. A server makes several ids per request (the request's, the reply's, the task's,
its context's, a push's `jti`) on two threads, the event loop's and the store's; each release
is a chance for the other thread to take the GIL and for this one to wait for it back. Measured
with bench/send_message.py at c=16, those hand-offs cost more than the ids themselves.

So each thread draws `CHUNK` bytes from the kernel at a time and hands them out in order, each
byte once. The ids are exactly as unpredictable as before (every byte is the kernel's), only
fetched ahead. A forked child never hands out what its parent fetched: the fork starts a new
generation, and a thread's bytes from an older one are thrown away.
"""

from __future__ import annotations

import os
import threading
import uuid

__all__ = ["CHUNK", "random_bytes", "uuid4"]

CHUNK = 4096
"""Bytes fetched from the kernel at once: 256 ids per system call."""

_generation = [0]
"""Bumped in a forked child: every buffer it inherited is stale."""
os.register_at_fork(after_in_child=lambda: _generation.__setitem__(0, _generation[0] + 1))


class _Fetched(threading.local):
    """One thread's bytes from the kernel, and how many of them are handed out."""

    def __init__(self) -> None:
        self.data = b""
        self.used = 0
        self.generation = -1


_fetched = _Fetched()


def random_bytes(count: int) -> bytes:
    """`count` bytes from the kernel's random source, never handed out before (in this
    process or another)."""
    fetched = _fetched
    if fetched.generation != _generation[0] or fetched.used + count > len(fetched.data):
        fetched.data = os.urandom(max(CHUNK, count))
        fetched.used, fetched.generation = 0, _generation[0]
    start = fetched.used
    fetched.used = start + count
    return fetched.data[start : fetched.used]


def uuid4() -> uuid.UUID:
    """A version 4 UUID, as `uuid.uuid4()` makes it (RFC 9562: 122 random bits)."""
    return uuid.UUID(bytes=random_bytes(16), version=4)
