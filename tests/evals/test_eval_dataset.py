"""An eval dataset read from TOML: what a person writes becomes frozen records; every mistake
of a file is named at once, with its place, and nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from looping_core.evals import DatasetError, load_dataset

EXAMPLE = Path(__file__).parents[2] / "examples" / "evals.toml"


def test_the_example_dataset_reads() -> None:
    dataset = load_dataset(EXAMPLE)
    assert [case.name for case in dataset.cases] == [
        "counts words", "keeps a note", "triages a ticket", "refunds once approved",
    ]  # fmt: skip
    refunds = dataset.cases[3]
    assert [turn.expect.state for turn in refunds.turns] == ["input_required", "completed"]
    assert refunds.turns[1].approve == ("refund",)
    notes = dataset.cases[1].turns[0].expect
    assert notes.tools == ("add_note", "list_notes")
    assert notes.tool_calls[0].arguments == {"text": "remember milk"}


def problems_of(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "evals.toml"
    path.write_text(text)
    with pytest.raises(DatasetError) as refused:
        load_dataset(path)
    assert str(refused.value).startswith(f"{path}: ")
    return list(refused.value.problems)


def test_every_mistake_is_named_with_its_place(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        """
[[cases]]
name = "a"
[[cases.turns]]
text = "hi"
[cases.turns.expect]
state = "done"
text_matches = "("
max_cost = -1
rubric = "Is it kind?"
answer_schema = { type = 3 }
[[cases.turns]]
expect = { state = "completed" }

[[cases]]
name = "a"
tenant = "words"
turns = []
""",
    )
    assert problems == [
        "no tenant: set the dataset's tenant or the case's @ $.cases[0].tenant",
        "state must be one of completed, failed, canceled, rejected, input_required,"
        " auth_required, working, submitted @ $.cases[0].turns[0].expect.state",
        "not a regular expression: missing ), unterminated subpattern at position 0"
        " @ $.cases[0].turns[0].expect.text_matches",
        "not a usable JSON Schema: it is not a valid JSON Schema (3 is not valid under any of the"
        " given schemas) @ $.cases[0].turns[0].expect.answer_schema",
        "must not be negative @ $.cases[0].turns[0].expect.max_cost",
        "a rubric needs the dataset's [judge] @ $.cases[0].turns[0].expect.rubric",
        "a turn sends text, data, or decisions (approve, deny) @ $.cases[0].turns[1]",
        "another case has the name 'a' @ $.cases[1].name",
        "a case needs at least one [[cases.turns]] @ $.cases[1].turns",
    ]


def test_an_unknown_key_or_a_wrong_type_is_named(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        'tenant = "words"\n[[cases]]\nname = "a"\n[[cases.turns]]\ntext = 3\n'
        'expect = { stat = "completed" }\n',
    )
    assert any("@ $.cases[0].turns[0].text" in p and "expected a string" in p for p in problems)
    assert any("stat" in p and "@ $.cases[0].turns[0].expect" in p for p in problems)


def test_a_judge_names_one_model_and_shows_the_answer(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        'tenant = "words"\n[judge]\nprompt = "Grade it."\npasses = "["\ntenant = "notes"\n'
        'model = { model = "m" }\n[[cases]]\nname = "a"\n[[cases.turns]]\ntext = "hi"\n',
    )
    assert problems == [
        "the judge names one model: tenant or model @ $.judge",
        "not a regular expression: unterminated character set at position 0 @ $.judge.passes",
        "the prompt must show the judge the {answer} @ $.judge.prompt",
    ]


def test_a_file_that_is_not_toml_or_not_there(tmp_path: Path) -> None:
    assert problems_of(tmp_path, "cases = [")[0].startswith("invalid TOML: ")
    with pytest.raises(DatasetError, match="file not found @ \\$"):
        load_dataset(tmp_path / "missing.toml")
