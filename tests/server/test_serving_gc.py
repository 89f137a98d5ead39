"""A serving process keeps what its startup built out of the garbage collector's passes, and
collects that startup's garbage first."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from looping_core.config import load_config
from looping_core.server._serving import _serve
from looping_core.server.internal import create_app
from looping_core.testing import ed25519_private_jwk

from support.ports import unused_port

EXAMPLE = Path(__file__).parents[2] / "examples" / "looping.toml"


class _Cycle:
    """Garbage the collector alone can free: an object that refers to itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """No automatic pass during the test (only the server's own collection may free its
    garbage), and this test process's objects go back to the collector afterwards."""
    gc.unfreeze()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


async def test_once_it_listens_what_startup_built_is_frozen_and_its_garbage_freed(
    tmp_path: Path, unfrozen: None
) -> None:
    config = load_config(EXAMPLE)
    store = attrs.evolve(config.store, url=f"sqlite:///{tmp_path / 'looping.db'}")
    server = attrs.evolve(config.server, port=unused_port())
    config = attrs.evolve(config, server=server, store=store)
    app = create_app(config, environ={"A2A_SIGNING_KEY": json.dumps(ed25519_private_jwk("k"))})
    kept = _Cycle()  # startup's own: alive when the server comes up
    garbage = _Cycle()
    freed = weakref.ref(garbage)
    del garbage
    assert freed() is not None  # a cycle: only the collector frees it
    up = asyncio.Event()
    serving = asyncio.create_task(_serve(app, config, worker=True, on_up=up.set, metrics=None))
    try:
        await asyncio.wait_for(up.wait(), 10)
        assert gc.get_freeze_count() > 0
        assert all(found is not kept for found in gc.get_objects())  # in no generation a pass walks
        assert freed() is None  # collected, not frozen for good
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
