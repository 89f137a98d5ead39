"""Load benchmark: authenticated SendMessage against looping-core vs the official SDK's server.

    python bench/send_message.py [--seconds 5] [--levels 1,16,64] [--workers 1,2] [--rounds 3]
                                 [--bindings jsonrpc,grpc] [--push] [--metrics]
                                 [--store sqlite|postgres] [--python-load] [--lean] [--floor]
                                 [--profile FOLDER] [--json results.json]

Starts `looping serve` on the embedded store (SQLite WAL in a temporary folder) with the example
WordCountAgent, once per `--workers` count, and drives `SendMessage` at each concurrency level
with an external load generator: `wrk` (Debian package `wrk`) running bench/send_message.lua, or,
without it, an aiohttp client in this process (which then shares the CPU with the server). Every
request carries its own gateway token, minted beforehand and never used twice, and a new
messageId: every token is verified, every task is a new turn committed to SQLite and run.

Then it starts the official A2A Python SDK's in-memory, unauthenticated server
(bench/sdk_server.py, the same word count) and drives it with the same requests. It prints
requests/s, p50, p99 and the server's CPU time per request for each level; all of it `--rounds`
times, the servers taking turns, then the median requests/s of each and the ratios. Numbers only;
nothing is asserted.

`--bindings` adds the gRPC binding (the default when grpcio is installed): the same server also
serves `[server] grpc_port`, and after the JSON-RPC levels the same SendMessage goes over gRPC,
from grpcio clients in this process (bench/grpc_load.py; there is no external gRPC load generator
here), each call with its own token for the gRPC address; the peer is the SDK's gRPC server
(`sdk_server.py PORT grpc`) driven by the same clients.

Both servers get the same request: `returnImmediately: true` and no push config (the SDK server
sends no pushes). `--push` adds an inline push config to looping-core's requests, so each result
is also signed and pushed to a receiver in this process: more work on our side only.
`--metrics` makes looping-core record its Prometheus metrics (`[observability] metrics_port`).
`--lean` also drives the lean reference server (bench/lean_server.py: the least a durable,
authenticated SendMessage server of this design does, written straight down) in every round and
prints looping-core's CPU per request over its. `--floor` measures the floor under one
SendMessage (bench/floor.py: a token check, a bare HTTP exchange, a turn's SQLite statements) in
the same run, and prints the server's CPU per request over it. `--profile FOLDER` runs the
server under cProfile (bench/profiled_serve.py) and writes its stats there: where the time goes,
not how much (cProfile slows every call).
`--store postgres` runs looping-core on a throwaway PostgreSQL server on this machine (sharing
its CPUs), where every turn is a job of the job engine that the server processes also run;
bench/jobs.py measures the engine's completed turns/s and recovery on their own.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import astuple, dataclass
from pathlib import Path

import aiohttp
from aiohttp.test_utils import unused_port

from looping_core.testing import FakeGateway, ed25519_private_jwk

from bench_results import write_results  # bench/ is on the path
from throwaway_postgres import throwaway_postgres

HERE = Path(__file__).parent
ROOT = HERE.parent
WRK_SCRIPT = HERE / "send_message.lua"
WARM_UP_SECONDS = 1

TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
"""Statements that read and write nothing (a group commit shares them among its batch)."""

Measured = dict[int, dict[str, float]]
"""Per concurrency level: requests/s, p50/p99 ms, server CPU ms per request, statements."""


@dataclass(frozen=True)
class Request:
    """What every request of a run carries besides its token and messageId."""

    url: str
    tenant: str | None
    push: dict[str, object] | None


@dataclass(frozen=True)
class Result:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    failed: int
    tokens_reused: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


Load = Callable[[Request, int, int, Path | None], Awaitable[Result]]


async def wrk_load(request: Request, concurrency: int, seconds: int, tokens: Path | None) -> Result:
    """`wrk` with one thread (the server needs the other cores) and `concurrency` connections."""
    command = [
        "wrk", "-t1", f"-c{concurrency}", f"-d{seconds}s", "-s", str(WRK_SCRIPT), request.url,
        "--", str(tokens or "-"), request.tenant or "-", uuid.uuid4().hex,
        json.dumps(request.push) if request.push else "-",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    output, errors = await process.communicate()
    lines = [line for line in output.decode().splitlines() if line.startswith("RESULT ")]
    if process.returncode != 0 or not lines:
        raise SystemExit(f"wrk failed:\n{output.decode()}\n{errors.decode()}")
    requests, micros, p50, p99, failed, reused = lines[0].split()[1:]
    return Result(
        int(requests), int(micros) / 1e6, float(p50), float(p99), int(failed), int(reused)
    )


async def python_load(
    request: Request, concurrency: int, seconds: int, tokens: Path | None
) -> Result:
    """The fallback without wrk: aiohttp clients in this process, sharing the CPU."""
    pool = tokens.read_text().split() if tokens else []
    run_id, sent, failed, latencies = uuid.uuid4().hex, 0, 0, []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.perf_counter() + seconds

        async def client() -> None:
            nonlocal sent, failed
            while time.perf_counter() < deadline:
                sent += 1
                headers = {"A2A-Version": "1.0"}
                if pool:
                    headers["Authorization"] = f"Bearer {pool[(sent - 1) % len(pool)]}"
                started = time.perf_counter()
                async with session.post(
                    request.url, json=envelope(request, f"{run_id}-{sent}"), headers=headers
                ) as response:
                    failed += response.status != 200 or "result" not in await response.json()
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    p50, p99 = (latencies[min(len(latencies) - 1, int(len(latencies) * q))] for q in (0.5, 0.99))
    reused = max(0, len(latencies) - len(pool)) if pool else 0
    return Result(len(latencies), elapsed, p50 * 1000, p99 * 1000, failed, reused)


async def grpc_bench_load(
    request: Request, concurrency: int, seconds: int, tokens: Path | None
) -> Result:
    """SendMessage over gRPC at `request.url` (a `host:port`), from grpcio clients here."""
    from grpc_load import grpc_load  # noqa: PLC0415 - the grpc extra, only when asked for

    measured = await grpc_load(
        request.url, tenant=request.tenant, push=request.push, concurrency=concurrency,
        seconds=seconds, tokens=tokens,
    )  # fmt: skip
    return Result(*measured)


def grpc_installed() -> bool:
    try:
        import grpc  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


HIGH_LIMITS = """
[limits]
caller_turns = 1000000
tenant_turns = 1000000
caller_requests_per_second = 1000000000
tenant_requests_per_second = 1000000000
"""
"""One caller sends every call: `[limits]` is set too high to refuse any, not off, so the run
still pays for its checks (a token bucket per call, the store's count per accepted turn)."""


def envelope(request: Request, message_id: str) -> dict[str, object]:
    """The JSON-RPC body `send_message.lua` builds too."""
    configuration: dict[str, object] = {"returnImmediately": True}
    if request.push:
        configuration["taskPushNotificationConfig"] = request.push
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "one two three"}]}
    params: dict[str, object] = {"message": message, "configuration": configuration}
    if request.tenant:
        params["tenant"] = request.tenant
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


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


@dataclass(frozen=True)
class ThreadUsage:
    """CPU seconds and context switches of the server's processes so far, split between their
    main threads (each one's event loop) and their other threads (looping-core's: the store's).
    A switch is a thread giving up its CPU, mostly to wait: for work, for I/O, or for the GIL
    another thread holds; all zero without Linux /proc."""

    loop_cpu: float = 0.0
    other_cpu: float = 0.0
    loop_switches: int = 0
    other_switches: int = 0

    def __add__(self, other: ThreadUsage) -> ThreadUsage:
        return ThreadUsage(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: ThreadUsage) -> ThreadUsage:
        return ThreadUsage(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


def thread_usage(pid: int) -> ThreadUsage:
    """`ThreadUsage` of the process `pid` and its live children."""
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return ThreadUsage()
    usage = ThreadUsage()
    for tid in threads:
        folder = Path(f"/proc/{pid}/task/{tid}")
        try:
            fields = (folder / "stat").read_text().rsplit(")", 1)[1].split()
            status = (folder / "status").read_text().splitlines()
        except OSError:
            continue  # ended meanwhile
        spent = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        switches = sum(int(line.split()[1]) for line in status if "ctxt_switches" in line)
        if tid == pid:
            usage += ThreadUsage(loop_cpu=spent, loop_switches=switches)
        else:
            usage += ThreadUsage(other_cpu=spent, other_switches=switches)
    for child in children:
        usage += thread_usage(int(child))
    return usage


async def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            if process.poll() is not None:
                raise SystemExit(f"the server exited with {process.returncode}")
            try:
                async with session.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "x"}):
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


async def run_levels(
    name: str,
    server: subprocess.Popen[bytes],
    request: Request,
    load: Load,
    *,
    levels: list[int],
    seconds: int,
    mint: Callable[[int], Path | None],
    statements: Path | None = None,
) -> Measured:
    await load(request, 8, WARM_UP_SECONDS, mint(WARM_UP_SECONDS))
    results: Measured = {}
    for concurrency in levels:
        tokens = mint(seconds)
        cpu_before = cpu_seconds(server.pid)
        usage_before = thread_usage(server.pid)
        counted_before = await statement_counts(server.pid, statements)
        result = await load(request, concurrency, seconds, tokens)
        per_request = 1000 / max(1, result.requests)
        cpu_ms = (cpu_seconds(server.pid) - cpu_before) * per_request
        usage = thread_usage(server.pid) - usage_before
        loops_ms, others_ms = usage.loop_cpu * per_request, usage.other_cpu * per_request
        loop_switches = usage.loop_switches * per_request / 1000
        other_switches = usage.other_switches * per_request / 1000
        results[concurrency] = {"rps": result.rps, "p50_ms": result.p50_ms,
                                 "p99_ms": result.p99_ms, "cpu_ms": cpu_ms,
                                 "loop_cpu_ms": loops_ms, "other_cpu_ms": others_ms,
                                 "loop_switches": loop_switches,
                                 "other_switches": other_switches}  # fmt: skip
        reused = f"   TOKENS REUSED: {result.tokens_reused}" if result.tokens_reused else ""
        counted = ""
        if statements is not None:
            settled = await settled_counts(server.pid, statements)
            by_kind = {
                kind: (settled[kind] - counted_before.get(kind, 0)) / max(1, result.requests)
                for kind in settled
            }
            total = sum(by_kind.values())
            kinds = " ".join(f"{k} {v:.1f}" for k, v in sorted(by_kind.items()) if v >= 0.05)
            counted = f"   SQL {total:4.1f}/req ({kinds})"
            results[concurrency]["statements"] = total
            results[concurrency]["data_statements"] = total - sum(
                by_kind.get(kind, 0.0) for kind in TRANSACTION_CONTROL
            )
        print(
            f"{name:<26} c={concurrency:<3} {result.rps:7.0f} req/s   p50 {result.p50_ms:7.2f} ms"
            f"   p99 {result.p99_ms:7.2f} ms   server CPU {cpu_ms:5.2f} ms/req"
            f" (loops {loops_ms:4.2f}, other threads {others_ms:4.2f})   switches/req"
            f" {loop_switches:4.1f} + {other_switches:4.1f}"
            f"   failed: {result.failed}{reused}{counted}",
            flush=True,
        )
    return results


def server_pids(pid: int) -> list[int]:
    """The server process and its workers."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid, *(int(child) for child in children)]


async def statement_counts(pid: int, statements: Path | None) -> dict[str, int]:
    """The statements the server's processes ran so far, by kind (bench/counted_serve.py)."""
    if statements is None:
        return {}
    for stale in statements.parent.glob(f"{statements.name}.*"):
        stale.unlink()
    pids = server_pids(pid)
    for each in pids:
        os.kill(each, signal.SIGUSR1)
    files = [statements.with_name(f"{statements.name}.{each}") for each in pids]
    for _ in range(200):
        if all(file.exists() for file in files):
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the writes are small: done by now
    total: collections.Counter[str] = collections.Counter()
    for file in files:
        with contextlib.suppress(OSError, ValueError):
            total.update(json.loads(file.read_text()))
    return dict(total)


async def settled_counts(pid: int, statements: Path) -> dict[str, int]:
    """The counts once the turns of the level ran (their ends are statements of theirs too)."""
    previous: dict[str, int] = {}
    while True:
        await asyncio.sleep(0.3)
        counts = await statement_counts(pid, statements)
        if counts == previous:
            return counts
        previous = counts


async def bench_looping(
    gateway: FakeGateway, workers: int, args: argparse.Namespace, load: Load, folder: Path
) -> dict[str, Measured]:
    with contextlib.ExitStack() as stack:
        if args.store == "postgres":
            store = stack.enter_context(throwaway_postgres())
        else:
            store = f"sqlite:///{folder / f'workers-{workers}' / 'looping.db'}"
        return await _bench_looping(gateway, workers, args, load, folder, store=store)


async def _bench_looping(
    gateway: FakeGateway,
    workers: int,
    args: argparse.Namespace,
    load: Load,
    folder: Path,
    *,
    store: str,
) -> dict[str, Measured]:
    port = unused_port()
    grpc_port = unused_port() if "grpc" in args.bindings else 0
    folder = folder / f"workers-{workers}"
    folder.mkdir()
    config = folder / "looping.toml"
    config.write_text(
        (ROOT / "examples" / "looping.toml").read_text()
        .replace("[server]\n", f"[server]\nworkers = {workers}\naccess_log = false\n"
                 f'event_loop = "{args.event_loop}"\ngrpc_port = {grpc_port}\n')
        .replace("port = 8080", f"port = {port}")
        .replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
        .replace('"http://127.0.0.1:9000"', json.dumps(gateway.origin))
        .replace("sqlite:///looping.db", store)
        + "\n[runner]\nconcurrency = 64\n"
        + HIGH_LIMITS
        + (f"\n[observability]\nmetrics_port = {unused_port()}\n" if args.metrics else "")
    )  # fmt: skip
    environment = dict(os.environ, A2A_SIGNING_KEY=json.dumps(ed25519_private_jwk("bench")))
    counts = folder / "statements" if args.store == "sqlite" else None
    command = [str(Path(sys.executable).with_name("looping"))]
    if args.profile is not None:
        stats = args.profile / f"looping-{plural(workers).replace(' ', '-')}.pstats"
        command = [sys.executable, str(HERE / "profiled_serve.py"), str(stats)]
        counts = None
    elif counts is not None:
        command = [sys.executable, str(HERE / "counted_serve.py"), str(counts)]
    server = subprocess.Popen(
        [*command, "serve", "--config", str(config)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}/a2a"
    minter = functools.partial(token_minter, gateway, folder, args.max_rate)
    push = gateway.push_config() if args.push else None
    try:
        await wait_ready(endpoint, server)
        series: dict[str, Measured] = {}
        if "jsonrpc" in args.bindings:
            series[plural(workers)] = await run_levels(
                f"looping-core ({plural(workers)})", server, Request(endpoint, "words", push),
                load, levels=args.levels, seconds=args.seconds, mint=minter(endpoint),
                statements=counts,
            )  # fmt: skip
        if grpc_port:
            from grpc_load import wait_ready as grpc_ready  # noqa: PLC0415

            address = f"127.0.0.1:{grpc_port}"
            await grpc_ready(address)
            series[f"gRPC, {plural(workers)}"] = await run_levels(
                f"looping-core gRPC ({plural(workers)})", server,
                Request(address, "words", push), grpc_bench_load,
                levels=args.levels, seconds=args.seconds, mint=minter(address),
                statements=counts,
            )  # fmt: skip
        return series
    finally:
        server.terminate()
        server.wait(timeout=30)


LEAN = "lean reference"
"""The lean reference server's name in the results (`--lean`)."""


def token_minter(
    gateway: FakeGateway, folder: Path, max_rate: int, audience: str
) -> Callable[[int], Path]:
    """Mints, for each level, one token per request it can send (`max_rate` requests/s for its
    seconds), each for `audience` and tenant `words`, into a file of its own in `folder`."""
    files = itertools.count(1)

    def mint(seconds: int) -> Path:
        path = folder / f"tokens-{audience.rsplit(':', 1)[-1].replace('/', '-')}-{next(files)}"
        count = seconds * max_rate
        tokens = (gateway.token(tenant="words", aud=audience, lifetime=900) for _ in range(count))
        path.write_text("\n".join(tokens) + "\n")
        return path

    return mint


async def bench_lean(
    gateway: FakeGateway, args: argparse.Namespace, load: Load, folder: Path
) -> Measured:
    """The lean reference server (bench/lean_server.py) on SQLite, with the same requests."""
    port = unused_port()
    folder = folder / "lean"
    folder.mkdir()
    endpoint = f"http://127.0.0.1:{port}/a2a"
    server = subprocess.Popen(
        [sys.executable, str(HERE / "lean_server.py"), str(port), endpoint, gateway.origin,
         str(folder / "lean.db")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await wait_ready(endpoint, server)
        return await run_levels(
            "lean reference", server, Request(endpoint, "words", None), load,
            levels=args.levels, seconds=args.seconds,
            mint=token_minter(gateway, folder, args.max_rate, endpoint),
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)


async def bench_sdk(args: argparse.Namespace, load: Load, binding: str = "jsonrpc") -> Measured:
    port = unused_port()
    grpc = ["grpc"] if binding == "grpc" else []
    server = subprocess.Popen(
        [sys.executable, str(HERE / "sdk_server.py"), str(port), *grpc], stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        if grpc:
            from grpc_load import wait_ready as grpc_ready  # noqa: PLC0415

            url = f"127.0.0.1:{port}"
            await grpc_ready(url)
        else:
            await wait_ready(url, server)
        request = Request(url, None, None)
        return await run_levels(
            "a2a-sdk" + (" gRPC" if grpc else ""), server, request,
            grpc_bench_load if grpc else load,
            levels=args.levels, seconds=args.seconds, mint=lambda _: None,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)


def plural(workers: int) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}"


def integers(text: str) -> list[int]:
    return [int(item) for item in text.split(",")]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=5, help="seconds per level")
    parser.add_argument("--levels", type=integers, default=[1, 16, 64], help="concurrency levels")
    parser.add_argument(
        "--workers",
        type=integers,
        default=sorted({1, os.cpu_count() or 1}),
        help="looping-core server processes to measure (default: 1 and one per CPU)",
    )
    parser.add_argument(
        "--bindings",
        type=lambda text: text.split(","),
        default=["jsonrpc", "grpc"] if grpc_installed() else ["jsonrpc"],
        help="the bindings to measure: jsonrpc, grpc (default: both when grpcio is installed)",
    )
    parser.add_argument("--push", action="store_true", help="also push every result (ours)")
    parser.add_argument(
        "--max-rate", type=int, default=3000, help="tokens minted per second of load"
    )
    parser.add_argument("--python-load", action="store_true", help="do not use wrk")
    parser.add_argument(
        "--metrics", action="store_true", help="looping-core records Prometheus metrics"
    )
    parser.add_argument(
        "--store",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="looping-core's store: SQLite (embedded runner), or a throwaway PostgreSQL server"
        " on this machine (the job engine; every server process also runs jobs)",
    )
    parser.add_argument(
        "--event-loop",
        choices=["auto", "uvloop", "asyncio"],
        default="auto",
        help="looping-core's [server] event_loop",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="measure every server this often; report medians"
    )
    parser.add_argument(
        "--lean",
        action="store_true",
        help="also measure the lean reference server (bench/lean_server.py: the least a server"
        " of this design does) with the same requests, JSON-RPC on SQLite",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure the floor (bench/floor.py) in this run and print the server's CPU"
        " per request over it",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run looping-core's server under cProfile (bench/profiled_serve.py) and write its"
        " stats to this folder (slower: attribution only, not a measurement)",
    )
    parser.add_argument(
        "--json", type=Path, help="also write the medians here (bench/report.py renders them)"
    )
    return parser.parse_args()


async def main() -> None:
    args = arguments()
    load: Load = python_load if args.python_load or not shutil.which("wrk") else wrk_load
    driver = "wrk, 1 thread" if load is wrk_load else "aiohttp in the benchmark process"
    push = "a push config (looping-core)" if args.push else "no push config"
    push += ", metrics recorded" if args.metrics else ""
    push += f", store: {args.store}"
    print(
        f"{os.cpu_count()} CPUs; load: {driver}; {args.seconds} s per level, {args.rounds} rounds;"
        f" SendMessage, returnImmediately, {push}",
        flush=True,
    )
    # Rounds alternate the servers, so a slow spell of a shared machine hits all of them.
    runs: dict[str, list[Measured]] = {}
    for round_number in range(1, args.rounds + 1):
        print(f"\nround {round_number}", flush=True)
        with tempfile.TemporaryDirectory(prefix="looping-bench-") as folder:
            async with FakeGateway() as gateway:
                gateway.verify_pushes = False  # the load side must not spend CPU on verifying
                for workers in args.workers:
                    results = await bench_looping(gateway, workers, args, load, Path(folder))
                    for name, result in results.items():
                        runs.setdefault(name, []).append(result)
                if args.lean:
                    lean = await bench_lean(gateway, args, load, Path(folder))
                    runs.setdefault(LEAN, []).append(lean)
        if "jsonrpc" in args.bindings:
            runs.setdefault("a2a-sdk", []).append(await bench_sdk(args, load))
        if "grpc" in args.bindings:
            runs.setdefault("a2a-sdk gRPC", []).append(await bench_sdk(args, load, "grpc"))
    medians = {name: median_of(results) for name, results in runs.items()}
    print(f"\nmedian requests/s of {args.rounds} rounds, and looping-core / a2a-sdk")
    for binding, prefix, peer in (("jsonrpc", "", "a2a-sdk"), ("grpc", "gRPC, ", "a2a-sdk gRPC")):
        if binding not in args.bindings:
            continue
        for level in args.levels:
            sdk = medians[peer][level]["rps"]
            ours = "   ".join(
                f"{plural(workers)} {medians[prefix + plural(workers)][level]['rps']:6.0f} ="
                f" {medians[prefix + plural(workers)][level]['rps'] / sdk:4.2f}x"
                for workers in args.workers
            )
            print(f"{binding:<8} c={level:<3} {peer} {sdk:5.0f}   looping-core {ours}")
    extra: dict[str, object] = {}
    if LEAN in runs:
        ratios = over_lean(args, runs)
        print_over_lean(args, medians, ratios)
        extra["cpu_over_lean"] = {
            f"looping-core, {name}": {str(level): [round(r, 3) for r in each]
                                      for level, each in by_level.items()}
            for name, by_level in ratios.items()
        }  # fmt: skip
    if args.floor:
        parts = await floor_parts(args)
        print_over_floor(args, medians, parts)
        extra["floor_ms"] = round(parts["floor"] * 1000, 3)
    if args.json:
        series = {
            (name if name.startswith(("a2a-sdk", LEAN)) else f"looping-core, {name}"): points
            for name, points in medians.items()
        }
        write_results(args.json, "send_message", series, store=args.store, push=args.push,
                      seconds=args.seconds, rounds=args.rounds, **extra)  # fmt: skip


async def floor_parts(args: argparse.Namespace) -> dict[str, float]:
    """The floor under one SendMessage (bench/floor.py), measured now, in this run."""
    from floor import measure  # noqa: PLC0415 - bench/ is on the path

    print("\nthe floor, measured now (bench/floor.py)", flush=True)
    level = 16 if 16 in args.levels else args.levels[-1]
    return await measure(args.seconds, level)


def print_over_floor(
    args: argparse.Namespace, medians: dict[str, Measured], parts: dict[str, float]
) -> None:
    """The median server CPU per JSON-RPC SendMessage of each level, over the floor."""
    floor_ms = parts["floor"] * 1000
    print(f"\nserver CPU per request / the floor ({floor_ms:.3f} ms), JSON-RPC")
    for level in args.levels:
        ours = "   ".join(
            f"{plural(workers)} {medians[plural(workers)][level]['cpu_ms']:5.3f} ms ="
            f" {medians[plural(workers)][level]['cpu_ms'] / floor_ms:4.2f}x"
            for workers in args.workers
        )
        if LEAN in medians:
            lean = medians[LEAN][level]["cpu_ms"]
            ours += f"   lean reference {lean:5.3f} ms = {lean / floor_ms:4.2f}x"
        print(f"c={level:<3} {ours}")


def over_lean(
    args: argparse.Namespace, runs: dict[str, list[Measured]]
) -> dict[str, dict[int, list[float]]]:
    """Each looping-core server's CPU per request over the lean server's, round by round (the
    two ran one after the other in each round, so a slow spell of the machine hits both)."""
    return {
        plural(workers): {
            level: [
                ours[level]["cpu_ms"] / lean[level]["cpu_ms"]
                for ours, lean in zip(runs[plural(workers)], runs[LEAN], strict=True)
            ]
            for level in args.levels
        }
        for workers in args.workers
    }


def print_over_lean(
    args: argparse.Namespace,
    medians: dict[str, Measured],
    ratios: dict[str, dict[int, list[float]]],
) -> None:
    print("\nserver CPU per request: looping-core / the lean reference server, JSON-RPC")
    for level in args.levels:
        for name, by_level in ratios.items():
            each = ", ".join(f"{ratio:.2f}x" for ratio in by_level[level])
            print(
                f"c={level:<3} {name}: {medians[name][level]['cpu_ms']:5.3f} ms against"
                f" {medians[LEAN][level]['cpu_ms']:5.3f} ms; round by round {each}"
                f" (median {statistics.median(by_level[level]):.2f}x)"
            )


def median_of(runs: list[Measured]) -> Measured:
    """Each measurement's median over the rounds, level by level."""
    return {
        level: {
            key: statistics.median(run[level][key] for run in runs if key in run[level])
            for key in runs[0][level]
        }
        for level in runs[0]
    }


if __name__ == "__main__":
    asyncio.run(main())
