"""Fair fetching on the job engine: a turn's job priority is minus its tenant's unsettled turns
when it was accepted, so one tenant's backlog of queued jobs does not hold up another tenant's
next turn; and the turn limits hold across processes, counted in the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from looping_core.testing import FakeGateway, ed25519_private_jwk, tenant_toml

from support.engine import Processes, engine_config, rows
from support.ports import unused_port, unused_ports
from support.served import serve

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

KEY = ed25519_private_jwk("agent-key-1")
FLOOD = 10


def started(holds: list[Path]) -> list[Path]:
    return [hold for hold in holds if Path(f"{hold}.started").exists()]


async def until_started(holds: list[Path], count: int) -> None:
    async with asyncio.timeout(30):
        while len(started(holds)) < count:
            await asyncio.sleep(0.02)


async def test_one_tenants_backlog_waits_behind_another_tenants_next_turn(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    """One process, two turns at once; bob queues ten held turns (two run, eight wait as
    jobs), then carol sends one. Carol's job comes first among the waiting: it starts at the
    first slot freed (two at most, to allow for a fetch racing the send), not after bob's
    eight."""
    port = unused_port()
    config = engine_config(tmp_path, "one", port, gateway, postgres_url, runs=True)
    text = config.read_text().replace("[runner]\n", "[runner]\nconcurrency = 2\n", 1)
    text += "\n[tenants.bob.limits]\ncaller_turns = 0\ntenant_turns = 0\n"
    text += tenant_toml("carol", "support.agents:HoldingAgent")
    config.write_text(text)
    gateway.agent_jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    processes.add(await serve(config, port, KEY))
    endpoint = f"http://127.0.0.1:{port}/a2a"
    bob = [tmp_path / f"bob-{index}" for index in range(FLOOD)]
    for hold in bob:  # one at a time: their jobs' order is the order they were accepted in
        status, _ = await gateway.send_turn(endpoint, tenant="bob", text=f"file:{hold}")
        assert status == 200
    await until_started(bob, 2)
    carol = tmp_path / "carol"
    status, body = await gateway.send_turn(endpoint, tenant="carol", text=f"file:{carol}")
    assert status == 200, body
    freed = 0
    while not Path(f"{carol}.started").exists():
        running = [hold for hold in started(bob) if not hold.exists()]
        running[0].touch()  # one of bob's running turns ends
        freed += 1
        await until_started([*bob, carol], 2 + freed)
    assert freed <= 2, f"carol's turn started after {freed} of bob's turns ended"
    assert len(started(bob)) <= 4  # bob's backlog was still there
    priorities = rows(
        postgres_url,
        "SELECT priority FROM procrastinate_jobs WHERE task_name = 'looping.run_turn'"
        " AND status = 'todo' ORDER BY id",
    )
    assert [priority for (priority,) in priorities] == sorted(
        (priority for (priority,) in priorities), reverse=True
    )  # bob's later turns further back
    assert priorities[-1][0] < 0
    for hold in [*bob, carol]:
        hold.touch()
    await gateway.wait_for_pushes(FLOOD + 1, timeout=60)


async def test_the_turn_limit_holds_across_edges(
    tmp_path: Path, gateway: FakeGateway, postgres_url: str, processes: Processes
) -> None:
    """Two edges on one store: the caller's third turn is refused by the edge that did not
    accept the first two (the count is the store's)."""
    ports = unused_ports(2)
    configs = []
    for name, port in zip(("a", "b"), ports, strict=True):
        (tmp_path / name).mkdir()
        config = engine_config(tmp_path / name, name, port, gateway, postgres_url, runs=False)
        config.write_text(config.read_text() + "\n[tenants.bob.limits]\ncaller_turns = 2\n")
        configs.append(config)
    gateway.agent_jwks_url = f"http://127.0.0.1:{ports[0]}/.well-known/jwks.json"
    for config, port in zip(configs, ports, strict=True):
        processes.add(await serve(config, port, KEY))
    first = f"http://127.0.0.1:{ports[0]}/a2a"
    second = f"http://127.0.0.1:{ports[1]}/a2a"
    for _ in range(2):
        status, _ = await gateway.send_turn(first, tenant="bob", text="held")
        assert status == 200
    status, body = await gateway.send_turn(second, tenant="bob", text="held")
    assert status == 429, body
    assert body["error"]["data"][0]["reason"] == "TOO_MANY_TURNS"
    assert rows(postgres_url, "SELECT COUNT(*) FROM tasks") == [(2,)]
    status, _ = await gateway.send_turn(second, tenant="bob", text="held", subject="other")
    assert status == 200
