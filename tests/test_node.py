"""Who owns the turns a server runs: `node_of(config)`."""

from __future__ import annotations

import logging
import socket

import pytest

from looping_core.config import parse_config
from looping_core.server._startup import _host_node
from looping_core.server.internal import LOCAL_NODE, node_of


def config(store: str, node: str | None = None, engine: str = "auto") -> str:
    server = f'[server]\nnode = "{node}"\n' if node else ""
    return f'{server}[store]\nurl = "{store}"\n[runner]\nengine = "{engine}"\n'


def test_every_server_on_an_sqlite_store_is_the_local_node() -> None:
    assert node_of(parse_config(config("sqlite:///x.db"))) == LOCAL_NODE


def test_a_configured_node_wins_on_either_store() -> None:
    for store in ("sqlite:///x.db", "postgresql://db/looping"):
        assert node_of(parse_config(config(store, node="eu-1"))) == "eu-1"


def test_embedded_on_postgresql_without_a_node_takes_the_host_name_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _host_node.cache_clear()
    with caplog.at_level(logging.WARNING, logger="looping_core.server"):
        first = node_of(parse_config(config("postgresql://db/looping", engine="embedded")))
        second = node_of(parse_config(config("postgres://db/looping", engine="embedded")))
    assert first == second == socket.gethostname()
    assert caplog.text.count("[server] node is not set") == 1


def test_with_the_job_engine_the_node_is_only_a_record_and_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The engine recovers turns by their jobs, not by node: the host name is only noted."""
    _host_node.cache_clear()
    with caplog.at_level(logging.WARNING, logger="looping_core.server"):
        node = node_of(parse_config(config("postgresql://db/looping")))
    assert node == socket.gethostname()
    assert "[server] node" not in caplog.text
