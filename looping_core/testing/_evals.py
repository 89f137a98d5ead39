"""Evals as tests: a dataset's cases as pytest parameters, each run against an `AgentHarness`
(under a `FunctionModel`, a `TestModel` or a cassette: offline, in CI), and a failure that names
the case, the check, what it expected and what it got."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looping_core.errors import LoopingError
from looping_core.evals import CaseResult, load_dataset
from looping_core.evals import failure_lines as _failure_lines

__all__ = ["EvalSendFailed", "assert_eval_passed", "eval_cases"]


class EvalSendFailed(LoopingError):
    """The agent refused a turn of an eval case."""


def eval_cases(path: str | Path) -> list[Any]:
    """The cases of the dataset at `path`, as `pytest.param(dataset, case)` named by the case:
    `@pytest.mark.parametrize(("dataset", "case"), eval_cases("evals/agent.toml"))`."""
    import pytest  # noqa: PLC0415 - only here: the harness itself imports no pytest

    dataset = load_dataset(path)
    return [pytest.param(dataset, case, id=case.name) for case in dataset.cases]


def assert_eval_passed(result: CaseResult) -> None:
    """Fail the test unless every check of the run passed, naming each that did not."""
    if not result.passed:
        raise AssertionError("\n".join(_failure_lines([result])))
