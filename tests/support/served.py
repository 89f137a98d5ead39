"""`looping serve` in a child process, for tests that kill, restart or fork servers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp

from looping_core.testing import FakeGateway, config_toml, tenant_toml

TESTS = Path(__file__).parents[1]
"""On `PYTHONPATH` for served processes: they import `support.agents` and the like."""
KEY_VARIABLE = "LPT_SERVED_KEY"


NO_LIMITS = (
    "caller_turns",
    "tenant_turns",
    "caller_requests_per_second",
    "tenant_requests_per_second",
)


def write_config(
    path: Path,
    port: int,
    gateway: FakeGateway,
    *,
    on_restart: str = "resume",
    workers: int = 1,
    event_loop: str = "auto",
    more: str = "",
    store_url: str | None = None,
    grpc_port: int = 0,
) -> Path:
    """A config for tenant `bob`, served by a HoldingAgent, storing next to `path` (or in
    `store_url`); `more`: TOML added at the end."""
    extra = f"""
[runner]
on_restart = "{on_restart}"
restart_message = "Restarted; please send the request again."
[push]
backoff_seconds = 0.05
backoff_max_seconds = 0.2
""" + tenant_toml(
        "bob", "support.agents:HoldingAgent", "allow_configless = true\nmax_wait_seconds = 2"
    )
    # These tests flood one caller on purpose (hundreds of turns at once): [limits] has tests
    # of its own (tests/server/test_limits.py).
    extra += "[limits]\n" + "".join(f"{key} = 0\n" for key in NO_LIMITS)
    extra += more
    path.write_text(
        config_toml(
            port=port,
            gateway_origins=[gateway.origin],
            signing_key_env=KEY_VARIABLE,
            store_url=store_url or f"sqlite:///{path.parent / 'looping.db'}",
            server=f'workers = {workers}\nevent_loop = "{event_loop}"\ngrpc_port = {grpc_port}',
            extra=extra,
        )
    )
    return path


def log_of(config: Path) -> Path:
    return config.parent / "server.log"


def start(
    config: Path,
    key: dict[str, str],
    *arguments: str,
    command: str = "serve",
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `looping serve` (or `command`) in its own session (its log in server.log beside
    the config, or in `log`)."""
    environment = dict(os.environ, PYTHONPATH=str(TESTS))
    environment[KEY_VARIABLE] = json.dumps(key)
    script = str(Path(sys.executable).with_name("looping"))
    with (log or log_of(config)).open("ab") as output:
        return subprocess.Popen(
            [script, command, "--config", str(config), *arguments],
            env=environment,
            stdout=output,
            stderr=output,
            start_new_session=True,
        )


async def serve(
    config: Path, port: int, key: dict[str, str], *arguments: str
) -> subprocess.Popen[bytes]:
    """`start`, then wait until the server answers on `port` (the port it listens on)."""
    process = start(config, key, *arguments)
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            if process.poll() is not None:
                raise AssertionError(log_of(config).read_text())
            try:
                async with session.get(
                    f"http://127.0.0.1:{port}/.well-known/jwks.json"
                ) as response:
                    # Ours, not another test's server on the same port.
                    if response.status == 200 and any(
                        listens(pid, port) for pid in (process.pid, *children(process))
                    ):
                        return process
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    process.kill()
    process.wait(timeout=30)
    raise AssertionError(f"the server did not start:\n{log_of(config).read_text()}")


async def wait_for(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def children(process: subprocess.Popen[bytes]) -> list[int]:
    """The live child processes of `process` (a supervisor's workers)."""
    path = Path(f"/proc/{process.pid}/task/{process.pid}/children")
    return [int(pid) for pid in path.read_text().split()]


def has_exited(pid: int) -> bool:
    """Gone, or a zombie no one has reaped yet."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on `port` (IPv4 and IPv6), from /proc/net."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds a socket listening on `port`."""
    wanted = _listening_inodes(port)
    try:
        links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except (FileNotFoundError, PermissionError):
        return False
    return any(link.startswith("socket:[") and link[8:-1] in wanted for link in links)


async def wait_until_all_listen(process: subprocess.Popen[bytes], port: int, count: int) -> None:
    """Wait until `count` workers of the supervisor `process` listen on `port` (the kernel only
    spreads connections over sockets that exist)."""
    for _ in range(500):
        workers = children(process)
        if len(workers) == count and all(listens(pid, port) for pid in workers):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not all {count} workers listen on {port}")


async def start_worker(
    config: Path, key: dict[str, str], log: Path, *arguments: str
) -> subprocess.Popen[bytes]:
    """`looping worker` (its log in `log`), once it runs jobs."""
    process = start(config, key, *arguments, command="worker", log=log)
    for _ in range(600):
        # Its line first: a worker may run a job that ends it (a poison turn) right after.
        if log.exists() and "worker running jobs" in log.read_text():
            return process
        if process.poll() is not None:
            raise AssertionError(log.read_text())
        await asyncio.sleep(0.05)
    process.kill()
    process.wait(timeout=30)
    raise AssertionError(f"the worker did not start:\n{log.read_text()}")
