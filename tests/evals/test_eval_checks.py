"""Each check of a turn, on a task as the agent left it: it passes on what it expects, fails on
anything else, and then says what it expected and what it got. A schema's reference is never
fetched."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from looping_core.evals import Expect, ToolCallSpec, TurnOutcome, check_turn

TASK: dict[str, Any] = {
    "id": "t1",
    "contextId": "c1",
    "status": {"state": "TASK_STATE_COMPLETED", "message": {"parts": [{"text": "Noted milk."}]}},
    "artifacts": [
        {"parts": [{"text": "Noted milk."}, {"data": {"count": 2, "items": ["milk", "eggs"]}}]}
    ],
    "metadata": {
        "looping.usage": {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 50},
        "looping.cost": 0.0125,
        "looping.toolCalls": [
            {"id": "c1", "name": "add_note", "arguments": {"text": "milk", "tag": "food"}},
            {"id": "c2", "name": "list_notes", "arguments": {}},
        ],
    },
}
OUTCOME = TurnOutcome(TASK, seconds=1.5)


def verdicts(expect: Expect, outcome: TurnOutcome = OUTCOME) -> list[tuple[str, bool]]:
    return [(check.name, check.passed) for check in check_turn(expect, outcome)]


@pytest.mark.parametrize(
    ("expect", "passed"),
    [
        (Expect(state="completed"), True),
        (Expect(state="failed"), False),
        (Expect(text_contains=("milk",)), True),
        (Expect(text_contains=("bread",)), False),
        (Expect(text_matches=r"Noted \w+\."), True),
        (Expect(text_matches=r"^milk"), False),
        (Expect(answer={"count": 2, "items": ["milk", "eggs"]}), True),
        (Expect(answer={"count": 3}), False),
        (Expect(answer_schema={"type": "object", "properties": {"count": {"minimum": 2}}}), True),
        (Expect(answer_schema={"type": "object", "properties": {"count": {"minimum": 3}}}), False),
        (Expect(tools=("add_note", "list_notes")), True),
        (Expect(tools=("list_notes", "add_note")), False),
        (Expect(tools=()), False),
        (
            Expect(
                tool_calls=(ToolCallSpec("add_note", {"text": "milk"}), ToolCallSpec("list_notes"))
            ),
            True,
        ),
        (Expect(tool_calls=(ToolCallSpec("list_notes"), ToolCallSpec("add_note"))), False),
        (Expect(tool_calls=(ToolCallSpec("add_note", {"text": "eggs"}),)), False),
        (Expect(tools_not_called=("delete_note",)), True),
        (Expect(tools_not_called=("add_note",)), False),
        (Expect(max_tokens=200), True),  # 120 + 30 + 50
        (Expect(max_tokens=199), False),
        (Expect(max_cost=0.0125), True),
        (Expect(max_cost=0.01), False),
        (Expect(max_seconds=2), True),
        (Expect(max_seconds=1), False),
    ],
)
def test_a_check_passes_only_on_what_it_expects(expect: Expect, passed: bool) -> None:
    [(_, verdict)] = verdicts(expect)
    assert verdict is passed


def test_a_failed_check_says_what_it_expected_and_what_it_got() -> None:
    [check] = check_turn(Expect(tools=("list_notes",)), OUTCOME)
    assert (check.name, check.passed) == ("tools", False)
    assert (check.expected, check.got) == ('["list_notes"]', '["add_note", "list_notes"]')
    [cost] = check_turn(Expect(max_cost=1.0), TurnOutcome({**TASK, "metadata": {}}, 0.1))
    assert not cost.passed
    assert cost.got == "no cost (is the model in the served config's [prices]?)"
    [answer] = check_turn(Expect(answer_schema={"type": "object"}), TurnOutcome({"status": {}}, 0))
    assert (answer.passed, answer.got) == (False, "no answer")


def test_a_task_without_artifacts_is_read_from_its_status_message() -> None:
    asked = {
        "status": {
            "state": "TASK_STATE_INPUT_REQUIRED",
            "message": {"parts": [{"text": "Which one?"}]},
        }
    }
    assert verdicts(
        Expect(state="input_required", text_contains=("Which",)), TurnOutcome(asked, 0)
    ) == [
        ("state", True),
        ("text_contains", True),
    ]


async def test_a_schema_reference_is_never_fetched(aiohttp_server: Any) -> None:
    fetched: list[str] = []

    async def schema(request: web.Request) -> web.Response:
        fetched.append(request.path)
        return web.json_response({"type": "object"})

    app = web.Application()
    app.router.add_get("/schema.json", schema)
    server = await aiohttp_server(app)
    remote = {"$ref": f"http://127.0.0.1:{server.port}/schema.json"}
    [check] = check_turn(Expect(answer_schema=remote), OUTCOME)
    assert not check.passed
    assert check.expected == "a usable schema"
    assert fetched == []
