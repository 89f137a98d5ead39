"""Delegation benchmark: the scheduler's overhead per subtask, every step durable.

    python bench/delegation.py [--subtasks 20] [--waves 4] [--parallel 8] [--latency-ms 20]
                               [--repeat 5] [--json results.json]

One turn of a `RoundAgent` run by the embedded runner on SQLite: the model's first answer is a
plan of `--subtasks` subtasks in `--waves` waves (each subtask of a wave depends on every
subtask of the wave before), its second the final answer. Every subagent makes one model call.
The model is in-process and answers after exactly `--latency-ms`, so what is left of the wall
time is core's: the plan's check and storage, each subtask's durable state changes, each
subagent's session (its brief and its answer committed), and the waves' scheduling.

Prints, per turn: wall time, the model's share of it (each wave's subtasks in batches of
`--parallel`, times the latency, plus the parent's two calls), the overhead per subtask (wall
and CPU), and the dispatch latency (from a subtask's last dependency ending to it starting, p50
and max). Then the medians of `--repeat` turns. Numbers only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pluggy

from looping_core import hookspecs
from looping_core.a2a import Message, Part, Role, TaskState
from looping_core.agent import AgentContext, ModelRequest, StreamEnd
from looping_core.config import RunnerConfig
from looping_core.content import TextChunk, ToolUseChunk, Usage
from looping_core.contract import Identity, PluginInfo, SubtaskRecipe, SubtaskType
from looping_core.delegation import RoundAgent, RoundPolicy
from looping_core.plugins import PluginHost
from looping_core.plugins._registry import Contribution, LoadedPlugin, PluginRegistry, Provenance
from looping_core.runner.internal import LocalRunner, TurnDriver
from looping_core.store.internal import (
    Database,
    PluginAccess,
    SessionStore,
    SubtaskStore,
    TaskStore,
    bind,
    upgrade,
)

from bench_results import write_results  # bench/ is on the path

CALLER = Identity("bench", "https://gateway.bench", "caller")


@attrs.frozen
class Params:
    topic: str


class TimedModel:
    """Answers after exactly `latency` seconds: the plan to the parent's first call, text to
    every subagent and to the parent's last call."""

    label = "timed"

    def __init__(self, latency: float, plan: Mapping[str, Any]) -> None:
        self.latency = latency
        self.plan = plan

    async def aclose(self) -> None:
        """Nothing to release."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        await asyncio.sleep(self.latency)
        usage = Usage(input_tokens=10, output_tokens=2)
        planning = any(t.name == "delegate" for t in request.tools)
        if planning and len(request.messages) == 1:
            yield ToolUseChunk(0, json.dumps(self.plan), id=f"p-{uuid.uuid4()}", name="delegate")
            yield StreamEnd(usage, "tool_use")
            return
        yield TextChunk("done")
        yield StreamEnd(usage, "end")


class Planner(RoundAgent):
    parallel = 8

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Bench soul."

    def round_policy(self) -> RoundPolicy:
        return RoundPolicy(
            round_contract="Bench contract.",
            delegate_description="Bench delegate.",
            budget_note="Bench note.",
            plan_failed="Bench plan failed.",
            budget_spent="Bench budget spent.",
            canceled="Bench canceled.",
            max_parallel=self.parallel,
            max_subtasks=1000,
        )


def _host() -> PluginHost:
    kind = SubtaskType(
        "look", "Looks.", Params, lambda p: SubtaskRecipe(instructions="Bench recipe.")
    )
    source = Provenance("bench", "bench", "0")
    plugin = LoadedPlugin(
        source=source, obj=object(), info=PluginInfo(capability="Looks."), config=None, hooks=()
    )
    registry = PluginRegistry(plugins=(plugin,), subtask_types={"look": Contribution(kind, source)})
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    return PluginHost(registry, manager)


def make_plan(subtasks: int, waves: int) -> tuple[dict[str, Any], list[int]]:
    sizes = [subtasks // waves + (1 if i < subtasks % waves else 0) for i in range(waves)]
    items, previous, number = [], [], 0
    for size in sizes:
        current = []
        for _ in range(size):
            sid = f"s{number}"
            items.append(
                {"id": sid, "type": "look", "params": {"topic": sid}, "depends_on": previous}
            )
            current.append(sid)
            number += 1
        previous = current
    return {"subtasks": items}, sizes


async def one_turn(options: argparse.Namespace, folder: Path) -> dict[str, float]:
    plan, sizes = make_plan(options.subtasks, options.waves)
    database = Database.from_url(f"sqlite:///{folder / f'{uuid.uuid4()}.db'}")
    database.run_sync(lambda: (bind(database.peewee), upgrade(database.peewee)))
    store = TaskStore(database, node="local")
    subtasks = SubtaskStore(database, node="local")
    host = _host()
    model = TimedModel(options.latency_ms / 1000, plan)
    planner = type("Planner", (Planner,), {"parallel": options.parallel})
    agent = planner(AgentContext(tenant="bench", plugins=host, models=(model,)))
    turns = TurnDriver(
        store,
        {"bench": agent},
        {"bench": host},
        RunnerConfig(),
        sessions=SessionStore(database, node="local"),
        subtasks=subtasks,
        store_access=PluginAccess(database),
    )
    runner = LocalRunner(store, turns)
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=(Part(text="go"),))
    cpu, wall = time.process_time(), time.perf_counter()
    start = await store.start_turn(CALLER, message, None)
    runner.start(start.task.id)
    await runner.wait_settled(start.task.id, timeout=120)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    task = await store.get(CALLER, start.task.id)
    if task.status.state is not TaskState.TASK_STATE_COMPLETED:
        raise SystemExit(f"the turn ended {task.status.state.name}")
    records = await subtasks.subtasks(start.task.id)
    await runner.close()
    database.close()
    ended = {r.subtask_id: r.ended_us or 0 for r in records}
    dispatch = [
        ((r.started_us or 0) - max(ended[d] for d in r.depends_on)) / 1000
        for r in records
        if r.depends_on
    ]
    latency = options.latency_ms / 1000
    model_share = latency * (2 + sum(math.ceil(size / options.parallel) for size in sizes))
    count = len(records)
    return {
        "wall_ms": wall * 1000,
        "model_ms": model_share * 1000,
        "overhead_ms_per_subtask": (wall - model_share) * 1000 / count,
        "cpu_ms_per_subtask": cpu * 1000 / count,
        "dispatch_p50_ms": statistics.median(dispatch),
        "dispatch_max_ms": max(dispatch),
    }


async def run(options: argparse.Namespace) -> None:
    results = []
    with tempfile.TemporaryDirectory(prefix="looping-bench-") as folder:
        await one_turn(options, Path(folder))  # warm up
        for index in range(options.repeat):
            result = await one_turn(options, Path(folder))
            results.append(result)
            print(f"turn {index + 1}: " + _line(result), flush=True)
    medians = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print(
        f"\nmedians ({options.subtasks} subtasks in {options.waves} waves, at most"
        f" {options.parallel} at once, model latency {options.latency_ms} ms):\n" + _line(medians)
    )
    if options.json:
        write_results(options.json, "delegation", {"RoundAgent": {options.subtasks: medians}},
                      waves=options.waves, parallel=options.parallel,
                      latency_ms=options.latency_ms, repeat=options.repeat)  # fmt: skip


def _line(result: Mapping[str, float]) -> str:
    return (
        f"wall {result['wall_ms']:.1f} ms (model {result['model_ms']:.0f} ms)"
        f"  overhead {result['overhead_ms_per_subtask']:.2f} ms/subtask"
        f"  CPU {result['cpu_ms_per_subtask']:.2f} ms/subtask"
        f"  dispatch p50 {result['dispatch_p50_ms']:.2f} ms, max {result['dispatch_max_ms']:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subtasks", type=int, default=20)
    parser.add_argument("--waves", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--json", type=Path, help="also write the medians here (bench/report.py renders them)"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
