"""Random ids fetched ahead from the kernel: as random as `uuid.uuid4()`, each byte handed out
once, in one thread or many, and never the same in a forked child as in its parent."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from looping_core import _random


def test_a_uuid4_is_a_version_4_rfc_uuid() -> None:
    ids = [_random.uuid4() for _ in range(1000)]
    assert {value.version for value in ids} == {4}
    assert {value.variant for value in ids} == {uuid.RFC_4122}
    assert len(set(ids)) == 1000
    assert len(_random.uuid4().hex) == 32


def test_the_kernel_is_asked_once_per_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    counter = iter(range(1 << 30))

    def urandom(count: int) -> bytes:
        calls.append(count)
        return b"".join(next(counter).to_bytes(4, "big") for _ in range(count // 4))

    monkeypatch.setattr(_random.os, "urandom", urandom)
    monkeypatch.setattr(_random, "_fetched", _random._Fetched())
    handed = [_random.random_bytes(16) for _ in range(_random.CHUNK // 16 + 1)]
    assert calls == [_random.CHUNK, _random.CHUNK]
    # Every byte once: the 16-byte pieces are consecutive slices of what the kernel gave.
    assert len(set(handed)) == len(handed)
    assert b"".join(handed[:-1]) == b"".join(i.to_bytes(4, "big") for i in range(1024))
    # More than a chunk at once is fetched as one piece.
    assert len(_random.random_bytes(_random.CHUNK * 2)) == _random.CHUNK * 2
    assert calls[-1] == _random.CHUNK * 2


def test_threads_hand_out_their_own_bytes() -> None:
    found: list[bytes] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [_random.random_bytes(16) for _ in range(600)]
        with lock:
            found.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(found)) == 2400


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_never_hands_out_its_parents_bytes() -> None:
    _random.uuid4()  # the parent has bytes fetched ahead, which the child inherits
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.write(writing, _random.uuid4().bytes)
        finally:
            os._exit(0)
    os.close(writing)
    os.waitpid(child, 0)
    with os.fdopen(reading, "rb") as pipe:
        reported = pipe.read()
    # Without the fork's new generation, the child's next bytes would be the parent's next.
    assert len(reported) == 16
    assert reported != _random.uuid4().bytes
