"""Plans are checked as a whole; waves run in dependency order within the parallelism cap; a
failure fails dependants, not siblings; finished subtasks are never run again, and a changed
recipe starts its subtask afresh; workspaces hold their caps."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs
import pytest
from delegation_support import Sessions, Subtasks

from looping_core.agent import (
    AnswerSchema,
    ModelRequest,
    ModelUnavailable,
    StreamEnd,
    StructuredAnswer,
)
from looping_core.content import TextChunk, ToolResultMessage, Usage, UserMessage
from looping_core.contract import (
    SubtaskRecipe,
    SubtaskRecord,
    SubtaskType,
    Tool,
    ToolCall,
    ToolContext,
    ToolFamily,
)
from looping_core.delegation import (
    GuardedWorkspace,
    MemoryBacking,
    SubagentSetup,
    WorkspaceError,
    WorkspaceLimits,
    check_path,
    params_schema,
    parse_plan,
    run_waves,
    waves_as_run,
)
from looping_core.testing import FunctionModel, ModelReply
from looping_core.testing import ToolCall as ScriptedCall


@attrs.frozen
class Params:
    topic: str
    depth: int = 1


def recipe(params: Params) -> SubtaskRecipe:
    return SubtaskRecipe(instructions=f"Plugin words about {params.topic}.", max_rounds=2)


TYPES = {"research": SubtaskType("research", "Looks into a topic.", Params, recipe)}


def test_the_params_schema_follows_the_attrs_class() -> None:
    assert params_schema(Params) == {
        "type": "object",
        "properties": {"topic": {"type": "string"}, "depth": {"type": "integer"}},
        "additionalProperties": False,
        "required": ["topic"],
    }


def test_a_plan_with_problems_is_refused_whole_with_every_problem_named() -> None:
    planned, problems = parse_plan(
        {
            "subtasks": [
                {"id": "a", "type": "research", "params": {"topic": "x", "colour": "red"}},
                {"id": "b", "type": "nope", "params": {}},
                {"id": "c", "type": "research", "params": {"depth": "deep"}},
                {"id": "d", "type": "research", "params": {"topic": "y"}, "depends_on": ["zz"]},
                {"id": "d", "type": "research", "params": {"topic": "z"}},
            ]
        },
        TYPES,
    )
    assert planned == []
    text = "\n".join(problems)
    assert "colour" in text
    assert "subtasks[1].type: unknown subtask type 'nope' (known: research)" in text
    assert "subtasks[2].params" in text
    assert "subtasks[4].id: 'd' is used twice" in text
    assert "subtask d: depends on 'zz', not in the plan" in text


def test_a_subtask_with_schema_errors_has_its_missing_dependencies_named_too() -> None:
    """Every problem at once: a subtask whose params are wrong also has its dependency on a
    missing id named (it used to come only on the next round), and a dependency on a subtask
    that has problems of its own is not called missing."""
    planned, problems = parse_plan(
        {
            "subtasks": [
                {"id": "a", "type": "research", "params": {"depth": 1}, "depends_on": ["ghost"]},
                {"id": "b", "type": "research", "params": {"topic": "y"}, "depends_on": ["a"]},
            ]
        },
        TYPES,
    )
    assert planned == []
    assert "subtask a: depends on 'ghost', not in the plan" in problems
    assert "required field missing at subtasks[0].params.topic" in problems
    assert not any("'a', not in the plan" in p for p in problems)


def test_a_cycle_is_named() -> None:
    plan = {
        "subtasks": [
            {"id": "a", "type": "research", "params": {"topic": "x"}, "depends_on": ["c"]},
            {"id": "b", "type": "research", "params": {"topic": "x"}, "depends_on": ["a"]},
            {"id": "c", "type": "research", "params": {"topic": "x"}, "depends_on": ["b"]},
        ]
    }
    planned, problems = parse_plan(plan, TYPES)
    assert planned == []
    assert problems == ["cycle: a -> c -> b -> a"]


class Briefed:
    """A model that answers each subagent with the topic of its brief, after `delay` seconds,
    counting how many calls are in flight at once; `fail` topics are unavailable."""

    label = "briefed"

    def __init__(self, delay: float = 0.02, fail: Sequence[str] = ()) -> None:
        self.delay = delay
        self.fail = set(fail)
        self.in_flight = 0
        self.most = 0
        self.briefs: list[dict[str, Any]] = []
        self.requests: list[ModelRequest] = []

    async def aclose(self) -> None:
        """Nothing to release."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        self.requests.append(request)
        first = request.messages[0]
        assert isinstance(first, UserMessage)
        brief = json.loads(first.content[0].text)  # type: ignore[union-attr]
        self.briefs.append(brief)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        topic = brief["params"]["topic"]
        if topic in self.fail:
            raise ModelUnavailable(self.label, "down")
        yield TextChunk(f"found {topic}")
        yield StreamEnd(Usage(input_tokens=5, output_tokens=2), "end")


def records(depends: Mapping[str, Sequence[str]]) -> list[SubtaskRecord]:
    return [
        SubtaskRecord("task-1", key, "research", {"topic": key}, tuple(deps))
        for key, deps in depends.items()
    ]


def setup(model: Briefed, sessions: Sessions | None = None, parallel: int = 2) -> SubagentSetup:
    return SubagentSetup(
        models=(model,),
        families={},
        tool_context=ToolContext(tenant="t", instance_id="caller"),
        open_workspace=lambda instance: MemoryBacking().open("t", instance),
        session=sessions,  # type: ignore[arg-type]
        max_parallel=parallel,
    )


FIVE_IN_THREE_WAVES = {"a": [], "b": [], "c": ["a"], "d": ["a", "b"], "e": ["c", "d"]}


def recipes_of(plan: Sequence[SubtaskRecord]) -> dict[str, SubtaskRecipe]:
    return {r.subtask_id: recipe(Params(**r.params)) for r in plan}


async def test_five_subtasks_run_in_three_waves_within_the_cap() -> None:
    model, log = Briefed(), Subtasks()
    plan = records(FIVE_IN_THREE_WAVES)
    await log.add(plan)
    finished = await run_waves(plan, recipes_of(plan), log, setup(model, Sessions()))
    assert [w.subtasks for w in waves_as_run(finished)] == [("a", "b"), ("c", "d"), ("e",)]
    assert {r.subtask_id: (r.state, r.wave) for r in finished} == {
        "a": ("done", 1), "b": ("done", 1), "c": ("done", 2), "d": ("done", 2), "e": ("done", 3),
    }  # fmt: skip
    assert model.most <= 2
    e = next(b for b in model.briefs if b["params"]["topic"] == "e")
    assert e["inputs"] == {"c": "found c", "d": "found d"}  # a wave's results feed the next
    assert log.rows["e"].result == "found e"
    assert log.rows["e"].usage == attrs.asdict(Usage(input_tokens=5, output_tokens=2))


@attrs.frozen
class Finding:
    """What a subagent found."""

    topic: str
    sources: int


def _finder(request: ModelRequest) -> ModelReply:
    """Hands back a Finding: a wrong one first for topic "a", and never a fitting one for "z"."""
    brief = json.loads(request.messages[0].content[0].text)  # type: ignore[union-attr]
    topic = brief["params"]["topic"]
    corrected = isinstance(request.messages[-1], ToolResultMessage)
    wrong = topic == "z" or (topic == "a" and not corrected)
    return ModelReply(output={"topic": topic, "sources": "many" if wrong else len(brief["inputs"])})


async def test_a_subtask_type_with_a_result_type_hands_back_checked_data() -> None:
    log = Subtasks()
    plan = records({"a": [], "b": ["a"], "z": []})
    answers = {"research": StructuredAnswer(AnswerSchema.of(Finding), retries=1)}
    model = FunctionModel(_finder)
    finished = await run_waves(
        plan, recipes_of(plan), log, attrs.evolve(setup(model), answers=answers)
    )
    states = {r.subtask_id: (r.state, r.result, r.reason) for r in finished}
    assert states == {
        "a": ("done", {"topic": "a", "sources": 0}, None),
        "b": ("done", {"topic": "b", "sources": 1}, None),
        "z": ("failed", None, "OUTPUT_INVALID"),
    }
    b = next(r for r in model.requests if '"b"' in r.messages[0].content[0].text)  # type: ignore[union-attr]
    assert json.loads(b.messages[0].content[0].text)["inputs"] == {  # type: ignore[union-attr]
        "a": {"topic": "a", "sources": 0}  # data feeds the next wave as data
    }
    assert [t.name for t in b.tools] == ["final_answer"]


async def test_a_subagents_call_that_needs_approval_is_refused_and_never_runs() -> None:
    """A subagent cannot ask the caller (its turn is the delegating one's, mid-plan): such a
    call gets an error result saying so, and the subagent answers without it."""
    ran: list[Any] = []

    async def transfer(arguments: Mapping[str, Any], call: ToolCall) -> str:
        ran.append(arguments)
        return "sent"

    money = ToolFamily(
        "money",
        "Moves money.",
        lambda context: [
            Tool("transfer", "Transfer.", {"type": "object"}, transfer, requires_approval=True)
        ],
    )

    def told(request: ModelRequest) -> ModelReply | str:
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            return last.content[0].text
        return ModelReply(tool_calls=(ScriptedCall("transfer", {}),))

    plan = records({"a": []})
    recipes = {"a": SubtaskRecipe(instructions="Pay.", tool_families=("money",))}
    sub_setup = attrs.evolve(setup(FunctionModel(told)), families={"money": money})  # type: ignore[arg-type]
    [done] = await run_waves(plan, recipes, Subtasks(), sub_setup)
    assert ran == []
    assert done.result == (
        "not run: it needs the caller's approval, which cannot be asked for here"
    )


async def test_the_cap_holds_with_a_wide_wave() -> None:
    model = Briefed(delay=0.03)
    plan = records({f"s{i}": [] for i in range(7)})
    await run_waves(plan, recipes_of(plan), Subtasks(), setup(model, parallel=3))
    assert model.most == 3


async def test_a_failure_fails_its_dependants_not_its_siblings() -> None:
    model, log = Briefed(fail=["a"]), Subtasks()
    plan = records(FIVE_IN_THREE_WAVES)
    finished = await run_waves(plan, recipes_of(plan), log, setup(model))
    states = {r.subtask_id: (r.state, r.reason) for r in finished}
    assert states == {
        "a": ("failed", "MODEL_UNAVAILABLE"),
        "b": ("done", None),
        "c": ("failed", "dependency a did not finish"),
        "d": ("failed", "dependency a did not finish"),
        "e": ("failed", "dependency c did not finish"),
    }
    assert sorted(b["params"]["topic"] for b in model.briefs) == ["a", "b"]


async def test_a_finished_subtask_is_not_run_again_and_a_changed_one_starts_afresh() -> None:
    model, log, sessions = Briefed(), Subtasks(), Sessions()
    plan = records({"a": [], "b": ["a"]})
    first = await run_waves(plan, recipes_of(plan), log, setup(model, sessions))
    done = {r.subtask_id: r for r in first}
    # As after a crash: `a` is done; `b` was running when the process died.
    interrupted = [done["a"], attrs.evolve(done["b"], state="running", result=None)]
    again = Briefed()
    await run_waves(interrupted, recipes_of(plan), log, setup(again, sessions))
    assert [b["params"]["topic"] for b in again.briefs] == []  # b's answer was stored: not asked
    changed = {
        "b": SubtaskRecipe(instructions="Other plugin words.", max_rounds=2),
        "a": recipe(Params("a")),
    }
    fresh = Briefed()
    await run_waves(interrupted, changed, log, setup(fresh, sessions))
    assert [b["params"]["topic"] for b in fresh.briefs] == ["b"]  # a new fingerprint: afresh
    assert len([s for s in sessions.logs if s.startswith("b@")]) == 2


async def test_waves_resumed_after_a_crash_are_numbered_as_they_ran() -> None:
    """Wave 1 done, wave 2 interrupted: the resumed run's first wave is 2, not 3 (it used to
    skip a number, and the metadata listed waves 1 and 3)."""
    model, log = Briefed(), Subtasks()
    plan = records(FIVE_IN_THREE_WAVES)
    first = await run_waves(plan, recipes_of(plan), log, setup(model, Sessions()))
    done = {r.subtask_id: r for r in first}
    crashed = [
        done["a"], done["b"],
        attrs.evolve(done["c"], state="running", result=None, fingerprint=None),
        attrs.evolve(done["d"], state="running", result=None, fingerprint=None),
        attrs.evolve(done["e"], state="pending", result=None, wave=None, fingerprint=None),
    ]  # fmt: skip
    finished = await run_waves(crashed, recipes_of(plan), log, setup(Briefed(), Sessions()))
    assert [(w.wave, w.subtasks) for w in waves_as_run(finished)] == [
        (1, ("a", "b")), (2, ("c", "d")), (3, ("e",)),
    ]  # fmt: skip
    assert {r.subtask_id: r.wave for r in finished} == {"a": 1, "b": 1, "c": 2, "d": 2, "e": 3}


async def test_cancel_stops_every_running_subagent() -> None:
    model, log = Briefed(delay=30), Subtasks()
    plan = records({"a": [], "b": [], "c": ["a"]})
    job = asyncio.create_task(run_waves(plan, recipes_of(plan), log, setup(model)))
    while model.in_flight < 2:
        await asyncio.sleep(0.01)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert model.in_flight == 0
    assert {k: r.state for k, r in log.rows.items()} == {"a": "canceled", "b": "canceled"}


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../up", "a/../../b", "a//b", "./a", "a\x00b", "a\\b", "C:/x", "nul", "con.txt",
     "a/aux", "", "x" * 600, "dir/ends."],
)  # fmt: skip
def test_paths_that_could_escape_or_mislead_are_refused(path: str) -> None:
    with pytest.raises(WorkspaceError):
        check_path(path)


async def test_workspace_caps_are_errors_and_nothing_is_written() -> None:
    inner = MemoryBacking().open("t", "i")
    limits = WorkspaceLimits(max_file_bytes=10, max_total_bytes=15, max_files=2)
    space = GuardedWorkspace(inner, limits)
    await space.write_bytes("notes/a.txt", b"0123456789")
    with pytest.raises(WorkspaceError, match="at most 10 bytes"):
        await space.write_bytes("b.txt", b"x" * 11)
    with pytest.raises(WorkspaceError, match="at most 15 bytes"):
        await space.write_bytes("b.txt", b"x" * 6)
    await space.write_bytes("b.txt", b"x" * 5)
    with pytest.raises(WorkspaceError, match="at most 2 files"):
        await space.write_bytes("c.txt", b"x")
    await space.write_bytes("b.txt", b"y" * 5)  # rewriting a file counts its new size only
    with pytest.raises(WorkspaceError):
        await space.write_bytes("../escape.txt", b"x")
    assert await inner.list() == ["b.txt", "notes/a.txt"]
    assert await space.read_bytes("b.txt") == b"yyyyy"
