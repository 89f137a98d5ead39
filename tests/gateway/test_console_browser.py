"""The development console in a real browser (headless Chromium, the distribution's own, driven
by Playwright): a developer picks an agent from its verified cards, sends turns to the example
word counter, to a model-driven tenant and to a delegating one (their models answered over HTTP
by local model endpoints, as `looping model serve` answers), and sees each turn's timeline, its
tool calls, its plan as a graph and its push verified, without reading JSON. Screenshots are
taken along the way (into `$LOOPING_TEST_SCREENSHOTS` when set); any console error, failed
request or HTTP error of the page fails the test."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from looping_core.agent import ModelRequest
from looping_core.content import TextBlock, ToolResultMessage
from looping_core.gateway.internal import ConsoleGateway, ConsoleTarget
from looping_core.modelserver import ModelServer
from looping_core.testing import FunctionModel, ModelReply, TestModel, ToolCall, ed25519_private_jwk

from support import payer_model
from support.agents import RELEASE
from support.browser import watched_page
from support.serving import serving

pytestmark = pytest.mark.slow

CARD = """[tenants.{id}.card]
name = "{name}"
description = "{description}"
skills = [{{ id = "{id}", name = "{name}", description = "{description}", tags = ["{id}"] }}]
"""


def tenants(keeper_model: str, planner_model: str, payer_model: str) -> str:
    def model(url: str) -> str:
        return f'model = "m"\nbase_url = "{url}"\nmax_retries = 0\n'

    return (
        '[plugins]\nenabled = ["example-notes"]\n\n'
        '[tenants.words]\nagent = "looping_plugins_example.agent:WordCountAgent"\n'
        + CARD.format(id="words", name="Word counter", description="Counts words.")
        + '[tenants.keeper]\nagent = "support.agents:NotesAgent"\nplugins = ["example-notes"]\n'
        + CARD.format(id="keeper", name="Keeper", description="Keeps notes.")
        + f"[tenants.keeper.model]\n{model(keeper_model)}"
        + '[tenants.planner]\nagent = "support.agents:PlanningAgent"\n'
        + 'plugins = ["example-notes"]\n'
        + CARD.format(id="planner", name="Planner", description="Delegates summaries.")
        + f"[tenants.planner.model]\n{model(planner_model)}"
        + '[tenants.triage]\nagent = "support.agents:TriageAgent"\nplugins = ["example-notes"]\n'
        + CARD.format(id="triage", name="Triage", description="Answers in a schema.")
        + f"[tenants.triage.model]\n{model(keeper_model)}"
        + '[tenants.payer]\nagent = "support.agents:PayingAgent"\n'
        + CARD.format(id="payer", name="Payer", description="Pays when allowed.")
        + f"[tenants.payer.model]\n{model(payer_model)}"
    )


def planner(request: ModelRequest) -> ModelReply | str:
    """The planner's model, reacting to what it is sent: a plan of two waves when it may
    delegate, a summary of the topic its brief names as a subagent, then the final answer."""
    offered = {tool.name for tool in request.tools}
    last = request.messages[-1]
    if "delegate" in offered and not isinstance(last, ToolResultMessage):
        plan = [
            {"id": "a", "type": "summarize-notes", "params": {"topic": "milk"}},
            {
                "id": "b",
                "type": "summarize-notes",
                "params": {"topic": "eggs"},
                "depends_on": ["a"],
            },
        ]
        return ModelReply(tool_calls=(ToolCall("delegate", {"subtasks": plan}, id="p1"),))
    if "delegate" in offered:
        return "Both summarized."
    brief = " ".join(b.text for b in last.content if isinstance(b, TextBlock))
    return "Eggs summary." if "eggs" in brief else "Milk summary."


@contextlib.asynccontextmanager
async def console_for() -> AsyncIterator[ConsoleGateway]:
    """The console's gateway before an agent whose models are local model endpoints: the
    keeper's `TestModel` (it calls every tool once, then answers with their results) and the
    planner's reacting function."""
    async with (
        ModelServer(TestModel()) as keeper_model,
        ModelServer(FunctionModel(planner)) as planner_model,
        ModelServer(payer_model.model) as paying_model,
        ConsoleGateway(ed25519_private_jwk("console-gateway")) as gateway,
        serving(
            gateway,
            server="inspection = true",
            extra=tenants(keeper_model.base_url, planner_model.base_url, paying_model.base_url),
        ) as agent,
    ):
        gateway.target = ConsoleTarget.of(agent.config)
        yield gateway


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("LOOPING_TEST_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def send(page: Any, tenant: str, text: str) -> None:
    """Choose the agent, send `text`, and wait until the task's detail shows it ended."""
    before = await page.locator("#detail-id").inner_text()
    await page.locator(f'#agents li[data-tenant="{tenant}"]').click()
    await page.locator("#text").fill(text)
    await page.locator("#send").click()
    await page.wait_for_function(
        "before => document.querySelector('#detail-id').textContent !== before"
        " && document.querySelector('#detail-state').textContent === 'completed'",
        arg=before,
        timeout=15_000,
    )


async def tab(page: Any, name: str) -> Any:
    await page.locator(f'#tabs button[data-tab="{name}"]').click()
    shown = page.locator(f"#tab-{name}")
    await shown.wait_for(state="visible")
    return shown


async def test_a_developer_watches_turns_tool_calls_a_plan_and_pushes(shots: Path) -> None:
    problems: list[str] = []
    async with console_for() as gateway, watched_page(problems) as page:
        await page.set_viewport_size({"width": 1440, "height": 1000})
        await page.goto(gateway.console_url)
        agents = page.locator("#agents")
        await agents.locator('li[data-tenant="words"] .name').wait_for()
        assert await agents.get_by_text("✓ signature verified").count() == 8
        assert "#token=" not in page.url  # the token left the address bar

        # The word counter: its timeline, then its push, verified by the gateway.
        await send(page, "words", "one two three")
        stream = await page.locator("#stream").inner_text()
        assert "Counted 3 words." in stream
        assert "whole artifact" in stream  # labelled, as chunks are
        timeline = await tab(page, "timeline")
        await timeline.get_by_text("word-count: 3").wait_for()
        assert "working" in await timeline.inner_text()
        pushes = await tab(page, "pushes")
        await pushes.get_by_text("✓ verified").wait_for(timeout=10_000)
        await pushes.get_by_text("delivered").wait_for(timeout=10_000)  # its outbox, reread
        await page.screenshot(path=shots / "console-word-counter.png", full_page=True)
        token = await tab(page, "token")
        assert "words" in await token.inner_text()
        assert "caller" in await token.inner_text()

        # The model-driven tenant (TestModel: every tool once, then their results): each
        # tool call with its arguments, and each tool's result.
        await send(page, "keeper", "remember milk")
        conversation = await tab(page, "conversation")
        await conversation.get_by_text("calls add_note").wait_for()
        said = await conversation.inner_text()
        assert "calls list_notes" in said
        assert '"text": ' in said  # add_note's argument, as the model sent it
        assert said.count("tool result") == 2
        assert '{"id":1}' in said  # the note add_note stored
        await page.screenshot(path=shots / "console-tool-calls.png", full_page=True)

        # The delegating tenant: its plan as a graph of two waves; a subagent's own talk.
        await send(page, "planner", "summarize my notes")
        plan = await tab(page, "plan")
        await plan.locator("svg").wait_for()
        nodes = plan.locator("svg g.node")
        assert await nodes.count() == 2
        assert await plan.locator("svg .edge").count() == 1
        labels = await plan.locator("svg").text_content() or ""
        assert "wave 1" in labels
        assert "wave 2" in labels
        await plan.locator('svg g.node[data-subtask="p1/b"]').click()
        await plan.get_by_text("Subtask p1/b").wait_for()
        assert "Eggs summary." in await plan.inner_text()
        await page.screenshot(path=shots / "console-plan.png", full_page=True)

        await a_structured_answer(page, shots)
        await the_tasks_listed(page, "the printer is on fire")
    assert problems == [], "\n".join(problems)


async def a_structured_answer(page: Any, shots: Path) -> None:
    """The tenant that answers in a schema: its answer as formatted JSON, not one line."""
    await send(page, "triage", "the printer is on fire")
    answer = page.locator("#stream pre.data").last
    await answer.wait_for()
    assert await answer.inner_text() == (
        '{\n  "summary": "the printer is on fire",\n  "priority": 0\n}'
    )
    timeline = await tab(page, "timeline")
    assert await timeline.locator("pre.data").count() >= 1
    await page.screenshot(path=shots / "console-structured-answer.png", full_page=True)


async def the_tasks_listed(page: Any, words: str) -> None:
    """The caller's tasks, each with its message's first words and its id's random end, and
    filtered by state."""
    tasks = page.locator("#tasks li[data-task]")
    await tasks.first.wait_for()
    assert await tasks.count() == 1  # the one of the tenant chosen last
    row = await tasks.first.inner_text()
    assert words in row  # the first words of its message
    task_id = await tasks.first.get_attribute("data-task") or ""
    assert task_id.replace("-", "")[-8:] in row  # the id's random end, not its time
    await page.locator("#filter-state").select_option("TASK_STATE_FAILED")
    await page.locator("#tasks").get_by_text("No tasks yet").wait_for()


async def test_a_developer_answers_a_question_and_cancels_a_running_turn(shots: Path) -> None:
    problems: list[str] = []
    async with console_for() as gateway, watched_page(problems) as page:
        await page.goto(gateway.console_url)
        await page.locator('#agents li[data-tenant="alice"] .name').wait_for()
        state = page.locator("#detail-state")

        # The agent asks; the console offers to answer on the same task, and the answer ends it.
        await page.locator('#agents li[data-tenant="alice"]').click()
        await page.locator("#text").fill("ask")
        await page.locator("#send").click()
        await page.locator("#continuing").wait_for(state="visible")
        # The banner shows as the stream ends; the task's detail is read after it.
        await page.locator("#detail-state", has_text="input_required").wait_for()
        asked = await page.locator("#detail-id").inner_text()
        assert await state.inner_text() == "input_required"
        await page.locator("#text").fill("this one")
        await page.locator("#send").click()
        await page.locator("#detail-state", has_text="completed").wait_for()
        assert await page.locator("#detail-id").inner_text() == asked  # the same task
        assert await page.locator("#continuing").is_hidden()
        assert "echo: this one" in await page.locator("#stream").inner_text()
        timeline = await page.locator("#tab-timeline").inner_text()
        assert timeline.index("input_required") < timeline.index("completed")
        await page.screenshot(path=shots / "console-answered.png", full_page=True)

        # A turn that holds: cancel it from the page while its stream is open.
        await page.locator('#agents li[data-tenant="bob"]').click()
        await page.locator("#text").fill("console-cancel")
        await page.locator("#send").click()
        await page.locator("#stream", has_text="working").wait_for()
        cancel = page.locator("#cancel")
        await cancel.click()
        await page.locator("#detail-state", has_text="canceled").wait_for()
        assert await cancel.is_disabled()
        assert "canceled" in await page.locator("#stream").inner_text()
        await page.screenshot(path=shots / "console-canceled.png", full_page=True)
    RELEASE.pop("console-cancel", None)
    assert problems == [], "\n".join(problems)


async def test_a_developer_approves_one_tool_call_and_denies_another(shots: Path) -> None:
    problems: list[str] = []
    async with console_for() as gateway, watched_page(problems) as page:
        await page.goto(gateway.console_url)
        await page.locator('#agents li[data-tenant="payer"]').click()

        # The turn waits: the call, its arguments as JSON, and a button for each decision.
        await page.locator("#text").fill("pay bob")
        await page.locator("#send").click()
        panel = page.locator("#approvals")
        await panel.wait_for(state="visible")
        [row] = await panel.locator("li").all()
        assert "pay" in await row.inner_text()
        assert await row.locator("pre.data").inner_text() == '{\n  "amount": 250,\n  "to": "bob"\n}'
        send = page.locator("#send-decisions")
        assert await send.is_disabled()  # every call must be decided
        await page.screenshot(path=shots / "console-approval.png", full_page=True)
        await row.get_by_role("button", name="Approve").click()
        await send.click()
        await page.locator("#detail-state", has_text="completed").wait_for()
        assert "paid 250 to bob" in await page.locator("#stream").inner_text()
        assert await panel.is_hidden()

        # Again, denied with a reason: the model hears it, the tool never runs.
        await page.locator("#text").fill("pay bob")
        await page.locator("#send").click()
        await panel.wait_for(state="visible")
        row = panel.locator("li").first
        await row.get_by_role("button", name="Deny").click()
        await row.locator("input").fill("not now")
        await send.click()
        await page.locator("#stream", has_text="denied by the caller (not now)").wait_for()
        await page.locator("#detail-state", has_text="completed").wait_for()
    assert problems == [], "\n".join(problems)
