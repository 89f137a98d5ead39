"""Load benchmark: authenticated SendMessage against looping-core vs the official SDK's server.

    python bench/send_message.py [--requests 2000] [--levels 1,16,64]

Starts `looping serve` on the embedded store (SQLite WAL in a temporary folder) with the example
WordCountAgent, and drives `SendMessage` from this separate process with a fresh gateway token per
request (every one verified, every task committed to SQLite, every result pushed back to the fake
gateway here). Then it starts the official A2A Python SDK's in-memory, unauthenticated server
(bench/sdk_server.py) doing the same work and drives it the same way, and prints requests/s,
p50 and p99 per concurrency level, and the ratio. Numbers only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp.test_utils import unused_port

from looping_core.testing import FakeGateway, ed25519_private_jwk

HERE = Path(__file__).parent
ROOT = HERE.parent


def message(text: str) -> dict[str, object]:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}


async def send_message(
    session: aiohttp.ClientSession,
    url: str,
    configuration: dict[str, object],
    *,
    tenant: str | None = None,
    token: str | None = None,
) -> int:
    """One SendMessage; the HTTP status, or 599 when the body is a JSON-RPC error."""
    params: dict[str, object] = {
        "message": message("one two three"),
        "configuration": configuration,
    }
    headers = {"A2A-Version": "1.0"}
    if tenant is not None:
        params["tenant"] = tenant
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    async with session.post(url, json=body, headers=headers) as response:
        payload = await response.json()
        return response.status if "result" in payload else 599


async def wait_ready(url: str, process: subprocess.Popen[bytes], body: dict[str, object]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            if process.poll() is not None:
                raise SystemExit(f"the server exited with {process.returncode}")
            try:
                async with session.post(url, json=body, headers={"A2A-Version": "1.0"}) as response:
                    await response.read()
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


async def drive(
    send: Callable[[aiohttp.ClientSession], Awaitable[int]], concurrency: int, total: int
) -> tuple[float, list[float], int]:
    """Send `total` requests from `concurrency` workers; (requests/s, latencies, failures)."""
    latencies: list[float] = []
    failures = 0
    remaining = total
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal remaining, failures
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                status = await send(session)
                latencies.append(time.perf_counter() - started)
                failures += status != 200

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return total / elapsed, latencies, failures


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process and its live children have used so far.

    Linux /proc only; 0.0 elsewhere, and the benchmark then prints no per-request CPU.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(int(child)) for child in children)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


async def run_levels(
    name: str,
    server: subprocess.Popen[bytes],
    send: Callable[[aiohttp.ClientSession], Awaitable[int]],
    levels: list[int],
    total: int,
) -> dict[int, float]:
    await drive(send, 8, min(200, total))  # warm up
    results = {}
    for concurrency in levels:
        cpu_before = cpu_seconds(server.pid)
        rps, latencies, failures = await drive(send, concurrency, total)
        server_cpu_ms = (cpu_seconds(server.pid) - cpu_before) / total * 1000
        results[concurrency] = rps
        p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
        print(
            f"{name:<14} c={concurrency:<3} {rps:8.0f} req/s   p50 {p50:7.2f} ms"
            f"   p99 {p99:7.2f} ms   server CPU {server_cpu_ms:5.2f} ms/req"
            f"   non-200: {failures}",
            flush=True,
        )
    return results


async def bench_looping(levels: list[int], total: int, folder: Path) -> dict[int, float]:
    async with FakeGateway() as gateway:
        gateway.verify_pushes = False  # the load generator must not spend its CPU on pushes
        port = unused_port()
        config = folder / "looping.toml"
        config.write_text(
            (ROOT / "examples" / "looping.toml").read_text()
            .replace("port = 8080", f"port = {port}")
            .replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
            .replace('"http://127.0.0.1:9000"', json.dumps(gateway.origin))
            .replace("sqlite:///looping.db", f"sqlite:///{folder / 'looping.db'}")
            + "\n[runner]\nconcurrency = 64\n"
        )  # fmt: skip
        environment = dict(os.environ, A2A_SIGNING_KEY=json.dumps(ed25519_private_jwk("bench")))
        server = subprocess.Popen(
            [str(Path(sys.executable).with_name("looping")), "serve", "--config", str(config)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # its INFO log would drown the numbers
        )
        endpoint = f"http://127.0.0.1:{port}/a2a"
        try:
            await wait_ready(endpoint, server, {"jsonrpc": "2.0", "id": 0, "method": "x"})

            async def send(session: aiohttp.ClientSession) -> int:
                token = gateway.token(tenant="words", aud=endpoint)  # fresh for every request
                configuration = {
                    "returnImmediately": True,
                    "taskPushNotificationConfig": gateway.push_config(),
                }
                return await send_message(
                    session, endpoint, configuration, tenant="words", token=token
                )

            return await run_levels("looping-core", server, send, levels, total)
        finally:
            server.terminate()
            server.wait(timeout=30)


async def bench_sdk(levels: list[int], total: int) -> dict[int, float]:
    port = unused_port()
    server = subprocess.Popen(
        [sys.executable, str(HERE / "sdk_server.py"), str(port)], stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        await wait_ready(url, server, {"jsonrpc": "2.0", "id": 0, "method": "x"})

        async def send(session: aiohttp.ClientSession) -> int:
            return await send_message(session, url, {"returnImmediately": True})

        return await run_levels("a2a-sdk", server, send, levels, total)
    finally:
        server.terminate()
        server.wait(timeout=30)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per level")
    parser.add_argument("--levels", default="1,16,64", help="concurrency levels")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    print(f"{os.cpu_count()} CPUs; {args.requests} requests per level; load from this process\n")
    with tempfile.TemporaryDirectory(prefix="looping-bench-") as folder:
        ours = await bench_looping(levels, args.requests, Path(folder))
    theirs = await bench_sdk(levels, args.requests)
    print()
    for level in levels:
        print(f"c={level:<3} looping-core / a2a-sdk = {ours[level] / theirs[level]:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
