"""Agent-loop benchmark: looping-core's LoopingAgent against pydantic-ai's Agent, same model server.

    python bench/agent_loop.py [--turns 200] [--levels 1,16] [--latency-ms 5] [--rounds 3]
                               [--repeat 3] [--their-transport httpx|aiohttp]
                               [--durable [--connections N]]
                               [--json results.json]

Every turn asks the model, runs the `lookup` tool it calls, gives it the result, three times
(`--rounds`), then takes its text answer: four model calls and three tool calls. The model is
bench/model_server.py in its own process (a fixed `--latency-ms` before each answer), so the CPU
time measured here is the agents' own.

- looping-core: a `LoopingAgent` with the tool as a typed `def` (`@tool`, in `agent_tools`) run by
  the embedded runner on an SQLite store, as `looping serve`
  runs it minus the HTTP edge: each turn is accepted (`start_turn`), begun, run and ended with
  guarded writes, and every step of the loop (the user message, each model response, each tool
  result) is committed to the session store before the next begins. It streams from the model.
- pydantic-ai: `Agent.run` with its OpenAI chat model (the same official `openai` client, on its
  default httpx transport, or with `--their-transport aiohttp` on the aiohttp one that
  looping-core's provider uses), the tool registered with `tool_plain`; its conversation stays in
  memory.

`--durable` runs both durably on a throwaway PostgreSQL server on this machine
(bench/throwaway_postgres.py; its CPU is counted for neither): looping-core's store and sessions
there (the embedded runner: the job engine's own cost is bench/jobs.py's), and pydantic-ai's agent
with pydantic-ai's `DBOSDurability` capability, each run in a DBOS workflow (each model request a
step, checkpointed in DBOS's system database on the same server). `--connections N` sets
looping-core's `[store] connections` (8 by default).

For each concurrency level it prints turns/s, p50 and p99 turn latency and CPU milliseconds per
turn, for both, `--repeat` times taking turns, then the medians. Numbers only; nothing is
asserted. Needs the `bench` and `openai` extras (`pip install -e '.[bench,openai]'`), and for
`--durable` the `postgres` one and PostgreSQL (`apt-get install postgresql`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pluggy
from aiohttp.test_utils import unused_port

from looping_core import hookspecs
from looping_core.a2a import Message, Part, Role, TaskState
from looping_core.agent import AgentContext, Budget, LoopingAgent, LoopingConfig, OpenAIChatModel
from looping_core.config import RunnerConfig
from looping_core.contract import Identity, Tool, ToolContext
from looping_core.plugins import PluginHost, PluginRegistry
from looping_core.runner.internal import LocalRunner, TurnDriver
from looping_core.store.internal import (
    Database,
    PluginAccess,
    SessionStore,
    TaskStore,
    bind,
    upgrade,
)
from looping_core.tools import tool

from bench_results import write_results  # bench/ is on the path
from throwaway_postgres import throwaway_postgres

HERE = Path(__file__).parent
CALLER = Identity("bench", "https://gateway.bench", "caller")
QUESTION = "Look the keys up, then say how many you looked up."


def lookup_value(key: str) -> str:
    return f"value of {key}"


@tool
def lookup(key: str) -> str:
    """Looks a key up."""
    return lookup_value(key)


@dataclass(frozen=True)
class Result:
    turns_per_second: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_turn: float


async def drive(turn: Callable[[], Awaitable[None]], turns: int, concurrency: int) -> Result:
    """Run `turns` turns, `concurrency` at a time; wall time, latencies and process CPU."""
    latencies: list[float] = []
    queue = iter(range(turns))

    async def worker() -> None:
        for _ in queue:
            started = time.perf_counter()
            await turn()
            latencies.append(time.perf_counter() - started)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    latencies.sort()
    return Result(
        turns_per_second=turns / wall,
        p50_ms=1000 * latencies[len(latencies) // 2],
        p99_ms=1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        cpu_ms_per_turn=1000 * cpu / turns,
    )


# -- looping-core ------------------------------------------------------------------------------


class BenchAgent(LoopingAgent):
    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Use the lookup tool when asked."

    def agent_config(self) -> LoopingConfig:
        return LoopingConfig(budget=Budget(max_rounds=10))

    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return [lookup]  # a typed `def`, as pydantic-ai's tool_plain below


def _host() -> PluginHost:
    """No plugins: the agent's tool is its own."""
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    return PluginHost(PluginRegistry(), manager)


class Ours:
    def __init__(self, base_url: str, store_url: str, connections: int | None = None) -> None:
        self.database = Database.from_url(store_url, connections=connections)
        self.database.run_sync(lambda: (bind(self.database.peewee), upgrade(self.database.peewee)))
        self.store = TaskStore(self.database, node="local")
        host = _host()
        model = OpenAIChatModel("bench", base_url=base_url, api_key="unused", max_retries=0)
        agent = BenchAgent(AgentContext(tenant="bench", plugins=host, models=(model,)))
        self.agent = agent
        turns = TurnDriver(
            self.store,
            {"bench": agent},
            {"bench": host},
            RunnerConfig(concurrency=64),
            sessions=SessionStore(self.database, node="local"),
            store_access=PluginAccess(self.database),
        )
        self.runner = LocalRunner(self.store, turns)

    async def turn(self) -> None:
        message = Message(
            message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text=QUESTION),)
        )
        start = await self.store.start_turn(CALLER, message, None)
        self.runner.start(start.task.id)
        await self.runner.wait_settled(start.task.id, timeout=60)
        task = await self.store.get(CALLER, start.task.id)
        if task.status.state is not TaskState.TASK_STATE_COMPLETED:
            raise AssertionError(f"a turn ended {task.status.state.name}")

    async def close(self) -> None:
        await self.runner.close()
        await self.agent.aclose()
        self.database.close()


# -- pydantic-ai -------------------------------------------------------------------------------


class Theirs:
    def __init__(self, base_url: str, transport: str, dbos_url: str | None = None) -> None:
        import openai  # noqa: PLC0415 - a bench-only dependency
        from pydantic_ai import Agent  # noqa: PLC0415
        from pydantic_ai.models.openai import OpenAIChatModel as PydanticOpenAIModel  # noqa: PLC0415
        from pydantic_ai.providers.openai import OpenAIProvider  # noqa: PLC0415

        self._http: Any = openai.DefaultAioHttpClient() if transport == "aiohttp" else None
        provider = OpenAIProvider(base_url=base_url, api_key="unused", http_client=self._http)
        durable = dbos_url is not None
        if durable:  # its runs are DBOS workflows, each model request a step
            from dbos import DBOS  # noqa: PLC0415 - a bench-only dependency
            from pydantic_ai.durable_exec.dbos import DBOSDurability  # noqa: PLC0415

            DBOS(config={"name": "bench", "system_database_url": dbos_url, "log_level": "WARNING"})
        durability = {"capabilities": [DBOSDurability()]} if durable else {}
        self.agent: Any = Agent(
            PydanticOpenAIModel("bench", provider=provider),
            instructions="Use the lookup tool when asked.",
            name="bench",
            **durability,
        )

        @self.agent.tool_plain
        def lookup(key: str) -> str:
            """Looks a key up."""
            return lookup_value(key)

        async def answer() -> str:
            return str((await self.agent.run(QUESTION)).output)

        self._answer: Callable[[], Awaitable[str]] = answer
        if durable:
            self._answer = DBOS.workflow(name="bench_answer")(answer)  # its output is recorded
            DBOS.launch()  # after the workflow is registered, as DBOS asks
        self._durable = durable

    async def turn(self) -> None:
        output = await self._answer()
        if not output.startswith("Looked up"):
            raise AssertionError(f"unexpected answer: {output!r}")

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
        if self._durable:
            from dbos import DBOS  # noqa: PLC0415

            DBOS.destroy()


# -- the run -----------------------------------------------------------------------------------


async def _wait_until_up(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.post(url, json={"model": "m", "messages": []}) as response:
                    await response.read()
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise SystemExit("the model server did not start")


async def run(options: argparse.Namespace) -> None:
    port = unused_port()
    server = subprocess.Popen(
        [
            sys.executable, str(HERE / "model_server.py"), str(port),
            "--latency-ms", str(options.latency_ms), "--rounds", str(options.rounds),
        ]
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    levels = [int(level) for level in options.levels.split(",")]
    results: dict[tuple[str, int], list[Result]] = {}
    try:
        await _wait_until_up(f"{base_url}/chat/completions")
        with contextlib.ExitStack() as stack:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="looping-bench-")))
            if options.durable:
                store_url = stack.enter_context(throwaway_postgres())
                dbos_url = store_url.rsplit("/", 1)[0] + "/bench_dbos"
                contenders: dict[str, Any] = {
                    "looping-core": Ours(base_url, store_url, options.connections),
                    "pydantic-ai": Theirs(base_url, options.their_transport, dbos_url),
                }
            else:
                contenders = {
                    "looping-core": Ours(base_url, f"sqlite:///{folder / 'bench.db'}"),
                    "pydantic-ai": Theirs(base_url, options.their_transport),
                }
            for contender in contenders.values():  # warm up: connections, imports
                await drive(contender.turn, 8, 4)
            for repeat in range(options.repeat):
                for level in levels:
                    for name, contender in contenders.items():
                        result = await drive(contender.turn, options.turns, level)
                        results.setdefault((name, level), []).append(result)
                        print(
                            f"round {repeat + 1}  c={level:<3} {name:<13}"
                            f" {result.turns_per_second:8.1f} turns/s"
                            f"  p50 {result.p50_ms:7.1f} ms  p99 {result.p99_ms:7.1f} ms"
                            f"  CPU {result.cpu_ms_per_turn:6.2f} ms/turn",
                            flush=True,
                        )
            for contender in contenders.values():
                await contender.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    durably = ", both durable on PostgreSQL" if options.durable else ""
    print(
        f"\nmedians ({options.rounds} tool rounds a turn, model latency {options.latency_ms} ms"
        f"{durably})"
    )
    for level in levels:
        ours = _median(results[("looping-core", level)])
        theirs = _median(results[("pydantic-ai", level)])
        for name, result in (("looping-core", ours), ("pydantic-ai", theirs)):
            print(
                f"c={level:<3} {name:<13} {result.turns_per_second:8.1f} turns/s"
                f"  p50 {result.p50_ms:7.1f} ms  p99 {result.p99_ms:7.1f} ms"
                f"  CPU {result.cpu_ms_per_turn:6.2f} ms/turn"
            )
        print(
            f"c={level:<3} ratio (ours/theirs): turns/s"
            f" {ours.turns_per_second / theirs.turns_per_second:.2f},"
            f" CPU per turn {ours.cpu_ms_per_turn / theirs.cpu_ms_per_turn:.2f}"
        )
    if options.json:
        series = {
            name: {level: measured(_median(results[(name, level)])) for level in levels}
            for name in ("looping-core", "pydantic-ai")
        }
        benchmark = "agent_loop_durable" if options.durable else "agent_loop"
        write_results(options.json, benchmark, series, turns=options.turns,
                      tool_rounds=options.rounds, latency_ms=options.latency_ms,
                      repeat=options.repeat, their_transport=options.their_transport)  # fmt: skip


def measured(result: Result) -> dict[str, float]:
    return {
        "turns_per_second": result.turns_per_second,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "cpu_ms": result.cpu_ms_per_turn,
    }


def _median(results: list[Result]) -> Result:
    return Result(
        turns_per_second=statistics.median(r.turns_per_second for r in results),
        p50_ms=statistics.median(r.p50_ms for r in results),
        p99_ms=statistics.median(r.p99_ms for r in results),
        cpu_ms_per_turn=statistics.median(r.cpu_ms_per_turn for r in results),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per measurement")
    parser.add_argument("--levels", default="1,16", help="concurrency levels")
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3, help="tool rounds per turn")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--their-transport",
        choices=("httpx", "aiohttp"),
        default="httpx",
        help="pydantic-ai's HTTP transport: its default (httpx), or the openai client's aiohttp"
        " one, which looping-core's provider uses",
    )
    parser.add_argument(
        "--durable",
        action="store_true",
        help="both on a throwaway PostgreSQL server: looping-core's store, and pydantic-ai"
        " with DBOSDurability, each run a DBOS workflow",
    )
    parser.add_argument(
        "--connections",
        type=int,
        help="with --durable: looping-core's store connections ([store] connections; default 8)",
    )
    parser.add_argument(
        "--json", type=Path, help="also write the medians here (bench/report.py renders them)"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
