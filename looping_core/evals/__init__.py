"""Evals: a dataset of cases, each a conversation of real turns sent through the local gateway,
with checks on each turn's outcome (its state, its text, its structured answer, the tools it
called and did not, its tokens, cost and seconds), and a judge that grades answers by a rubric
the dataset writes. `looping eval` runs a dataset against a served agent; the pytest plugin's
`eval_case` runs a case as a test.

- `load_dataset(path)`: the dataset (TOML), or `DatasetError` naming every problem;
- `run_dataset(dataset, send, ...)`: every case, `repeat` times, `concurrency` at once, each
  run a `CaseResult`; `run_case` runs one;
- `Send`: how a turn is sent (the local gateway's `TurnSender`, or a test harness);
- `Grader`, `judge_models`: the judge;
- `table`, `failure_lines`, `report_json`, `junit_xml`, `summarize`: what a run says;
- `state_of`, `text_of`, `answer_of`, `tool_calls_of`: what a turn's task says, the way the
  checks read it (for a predicate of your own in a test).
"""

from looping_core.evals._checks import (
    CheckResult,
    TurnOutcome,
    answer_of,
    check_turn,
    state_of,
    text_of,
    tool_calls_of,
)
from looping_core.evals._dataset import (
    STATES,
    Case,
    Dataset,
    DatasetError,
    Expect,
    Judge,
    ToolCallSpec,
    TurnSpec,
    load_dataset,
)
from looping_core.evals._judge import Grader, judge_models
from looping_core.evals._reports import (
    Summary,
    failure_lines,
    junit_xml,
    report_json,
    summarize,
    table,
)
from looping_core.evals._running import CaseResult, Send, TurnResult, run_case, run_dataset

__all__ = [
    "STATES",
    "Case",
    "CaseResult",
    "CheckResult",
    "Dataset",
    "DatasetError",
    "Expect",
    "Grader",
    "Judge",
    "Send",
    "Summary",
    "ToolCallSpec",
    "TurnOutcome",
    "TurnResult",
    "TurnSpec",
    "answer_of",
    "check_turn",
    "failure_lines",
    "judge_models",
    "junit_xml",
    "load_dataset",
    "report_json",
    "run_case",
    "run_dataset",
    "state_of",
    "summarize",
    "table",
    "text_of",
    "tool_calls_of",
]
