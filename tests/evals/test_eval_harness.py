"""Evals as tests: a dataset's cases as pytest parameters, each run against `AgentHarness` with
a model that reacts (offline); a conversation that asks for approval and gets it; a judge that
reads only the dataset's words; a failing case named with its check."""

from __future__ import annotations

from pathlib import Path

import pytest

from looping_core.evals import load_dataset, text_of, tool_calls_of
from looping_core.testing import (
    AgentHarness,
    FunctionModel,
    ScriptedModel,
    TestModel,
    assert_eval_passed,
    eval_cases,
)

from support.note_models import take_note

NOTES = """
tenant = "notes"

[judge]
system = "You grade answers."
prompt = "Rubric: {rubric}\\nAsked: {input}\\nAnswer: {answer}\\nSay PASS or FAIL."
passes = "^PASS"
model = { model = "grader" }

[[cases]]
name = "takes a note"
[[cases.turns]]
text = "remember milk"
[cases.turns.expect]
state = "completed"
tools = ["add_note"]
tool_calls = [{ name = "add_note", arguments = { text = "remember milk" } }]
text_contains = ["Noted"]
rubric = "It confirms the note."

[[cases]]
name = "expects too much"
[[cases.turns]]
text = "remember eggs"
expect = { tools = ["add_note", "list_notes"] }
"""


@pytest.fixture
def notes_dataset(tmp_path: Path) -> Path:
    path = tmp_path / "notes.toml"
    path.write_text(NOTES)
    return path


def notes_keeper() -> AgentHarness:
    return AgentHarness(
        "looping_plugins_example.agent:NotesKeeper",
        tenant="notes",
        plugins=["example-notes"],
        model=FunctionModel(take_note),
    )


def test_the_cases_are_pytest_parameters_named_by_the_case(notes_dataset: Path) -> None:
    params = eval_cases(notes_dataset)
    assert [param.id for param in params] == ["takes a note", "expects too much"]
    dataset, case = params[0].values
    assert case is dataset.cases[0]


async def test_a_case_runs_against_the_harness_and_the_judge_reads_the_datasets_words(
    notes_dataset: Path,
) -> None:
    dataset = load_dataset(notes_dataset)
    judge = ScriptedModel.says("PASS: it says it noted it.")
    async with notes_keeper() as agent:
        result = await agent.eval(dataset, dataset.cases[0], judge=[judge])
    assert_eval_passed(result)
    assert text_of(result.turns[0].outcome.task) == "Noted."  # what a predicate would read
    assert [call["name"] for call in tool_calls_of(result.turns[0].outcome.task)] == ["add_note"]
    assert [check.name for check in result.checks] == [
        "state", "text_contains", "tools", "tool_calls", "rubric",
    ]  # fmt: skip
    [asked] = judge.requests
    assert asked.system == "You grade answers."
    [prompt] = asked.messages
    said = prompt.content[0].text  # type: ignore[union-attr]
    assert (
        said
        == "Rubric: It confirms the note.\nAsked: remember milk\nAnswer: Noted.\nSay PASS or FAIL."
    )


async def test_a_judge_that_says_no_fails_the_case_with_its_words(notes_dataset: Path) -> None:
    dataset = load_dataset(notes_dataset)
    async with notes_keeper() as agent:
        result = await agent.eval(
            dataset, dataset.cases[0], judge=[ScriptedModel.says("FAIL: terse")]
        )
    assert not result.passed
    [failed] = result.failures
    assert (failed.name, failed.expected, failed.got) == (
        "rubric",
        "It confirms the note.",
        "FAIL: terse",
    )


async def test_a_failing_case_names_its_check(notes_dataset: Path) -> None:
    dataset = load_dataset(notes_dataset)
    async with notes_keeper() as agent:
        result = await agent.eval(dataset, dataset.cases[1])
    with pytest.raises(AssertionError) as failed:
        assert_eval_passed(result)
    assert str(failed.value) == (
        'expects too much (run 1): tools: expected ["add_note", "list_notes"], got ["add_note"]'
    )


async def test_a_conversation_asks_for_approval_and_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "refunds.toml"
    path.write_text(
        'tenant = "refunds"\n[[cases]]\nname = "refunds once approved"\n'
        '[[cases.turns]]\ntext = "Please refund order A1234."\n'
        'expect = { state = "input_required", tools = ["order_status", "refund"] }\n'
        '[[cases.turns]]\napprove = ["all"]\nexpect = { state = "completed" }\n'
    )
    dataset = load_dataset(path)
    harness = AgentHarness(
        "looping_plugins_example.agent:RefundDesk", tenant="refunds", model=TestModel()
    )
    async with harness as agent:
        result = await agent.eval(dataset, dataset.cases[0])
    assert_eval_passed(result)
    first, second = (turn.outcome.task for turn in result.turns)
    assert second["id"] == first["id"]  # the answer went to the task that asked
