"""Renders the error reference from the error table itself: `docs/errors.md` is its output.

Its second table, why a task failed, is `FAILURE_REASONS` below; `tests/docs/test_reference.py`
checks that it has every reason code core writes into a status message (`reasons_in_code`).

Regenerate after changing `looping_core/a2a/_errors.py`'s table, an error's docstring or a
reason:

    python tests/docs/errors_reference.py > docs/errors.md

`tests/docs/test_reference.py` fails while the page and the table differ.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from looping_core.a2a._errors import ERRORS  # the table itself (private: apps never need it)

HEADER = """# Errors

Every error the edge answers with, from the one table that decides them
(`looping_core/a2a/_errors.py`). On the JSON-RPC binding an error is a JSON-RPC error object
whose `data` holds a `google.rpc.ErrorInfo` (its `reason` and `domain` below; `-32602` adds
`google.rpc.BadRequest` field violations), sent with the HTTP status of the column "HTTP
(JSON-RPC)"; on the HTTP+JSON binding it is a `google.rpc.Status` body with the status and code
of the column "HTTP+JSON". A refused gateway token is `UNAUTHENTICATED`, with the name of the
check that refused it in `metadata.check` and in `WWW-Authenticate`: the checks and their names
are in [the zero-trust A2A edge](a2a-edge.md#gateway-tokens). Generated from
the code by `python tests/docs/errors_reference.py > docs/errors.md`.

| code | reason | domain | HTTP (JSON-RPC) | HTTP+JSON | standard message | when |
|---|---|---|---|---|---|---|
"""


REASONS_HEADER = """
## Why a task failed

A task that core ends as failed or rejected says why in its status message's metadata, as a code
for programs (`{"reason": "MODEL_UNAVAILABLE"}`); the words beside it, if any, are the app's. A
subtask of a delegation plan that fails records the same codes in its `reason`
(`looping.subtasks` in the task's metadata), or `dependency ID did not finish`. An agent may
give codes of its own (`TurnResult(reason=...)`).

| reason | state | when |
|---|---|---|
"""

FAILURE_REASONS = {
    "AGENT_ERROR": ("failed", "The tenant's agent raised. The error is logged with its traceback; "
                    "the caller learns only the code."),
    "TURN_GATE_DECLINED": ("rejected", "A plugin's turn gate (`should_handle_turn`) said no."),
    "UNSUPPORTED_CONTENT": ("failed", "The message holds a part that cannot be given to the agent "
                            "(the edge refuses such parts; a message stored by an earlier "
                            "release may hold one)."),
    "RUNNER_ERROR": ("failed", "The runner itself failed around the turn (logged with its "
                     "traceback)."),
    "INTERRUPTED_BY_RESTART": ("failed", "A crash or restart interrupted the turn and "
                               "`[runner] on_restart` is `\"fail\"`; the status message is "
                               "`restart_message`."),
    "WORKER_LOST": ("failed", "The job engine's workers died three times running this turn (it "
                    "may be what kills them); the status message is `restart_message`."),
    "MODEL_UNAVAILABLE": ("failed", "Every model of the tenant was unreachable, timed out or "
                          "answered 429/5xx, after the client's own retries."),
    "CONTEXT_TOO_LONG": ("failed", "The provider refused the conversation as too long even after "
                         "compaction."),
    "MODEL_ERROR": ("failed", "A model refused the request or answered something malformed; "
                    "another model would do no better."),
    "MODEL_EMPTY_ANSWER": ("failed", "The model's final answer held nothing a caller could use "
                           "(no text, image or audio)."),
    "OUTPUT_INVALID": ("failed", "The agent answers in a schema and no answer the model gave fit "
                       "it, after `output_retries` corrections (the last problem is in the "
                       "task's metadata, `looping.outputProblem`); a subtask whose type hands "
                       "back data fails with it too. See [structured answers]"
                       "(structured-answers.md)."),
}  # fmt: skip
"""Each reason code core writes: the state it ends the task in, and when."""

REASON_MODULES = ("runner/_turns.py", "agent/_looping.py", "delegation/_waves.py")
"""Where core decides a turn's or a subtask's reason."""


def reasons_in_code() -> set[str]:
    """The reason codes core's code writes: a string given as `reason=`, under a `"reason"` key,
    or returned by a function whose name says it gives a reason or a failure."""
    root = Path(__file__).parents[2] / "looping_core"
    found: set[str] = set()

    def codes(node: ast.AST) -> set[str]:
        return {
            n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isupper()
        }  # fmt: skip

    for module in REASON_MODULES:
        for node in ast.walk(ast.parse((root / module).read_text())):
            if isinstance(node, ast.keyword) and node.arg == "reason":
                found |= codes(node.value)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "reason":
                        found |= codes(value)
            elif isinstance(node, ast.FunctionDef) and node.name in ("_failure", "_reason"):
                for returned in ast.walk(node):
                    if isinstance(returned, ast.Return) and returned.value is not None:
                        found |= codes(returned.value)
    return found


def render() -> str:
    rows = []
    for error, spec in ERRORS.items():
        when = " ".join(inspect.cleandoc(error.__doc__ or "").split()).replace("|", "\\|")
        rows.append(
            f"| `{spec.code}` | `{spec.reason}` | `{spec.domain}` | {spec.http_status} |"
            f" {spec.rest[0]} `{spec.rest[1]}` | {spec.message} | {when} |"
        )
    reasons = [
        f"| `{code}` | {state} | {when} |" for code, (state, when) in FAILURE_REASONS.items()
    ]
    return HEADER + "\n".join(rows) + "\n" + REASONS_HEADER + "\n".join(reasons) + "\n"


if __name__ == "__main__":
    print(render(), end="")
