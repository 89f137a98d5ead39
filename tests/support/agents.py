"""Agents for the edge and runner tests (importable as `support.agents:Name`)."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from looping_core.agent import (
    Agent,
    AgentContext,
    ArtifactOut,
    Budget,
    ControlAction,
    LoopingAgent,
    LoopingConfig,
    ModelRequest,
    TurnInput,
    TurnOutcome,
    TurnResult,
    respond_with_fallback,
)
from looping_core.config import TenantModelConfig
from looping_core.content import RefusalBlock, TextBlock
from looping_core.contract import Tool, ToolCall, ToolContext
from looping_core.delegation import RoundAgent, RoundPolicy
from looping_core.tools import tool

RUNS: collections.Counter[str] = collections.Counter()
"""How many times each task's turns ran in this process."""

RELEASE: dict[str, asyncio.Event] = {}
"""Tests release a HoldingAgent's turn by its text."""


def text_of(turn: TurnInput) -> str:
    return " ".join(b.text for b in turn.message.content if isinstance(b, TextBlock))


class EchoAgent(Agent):
    """Echoes the text as an artifact; `ask` asks for input; `refuse` refuses; `boom` raises."""

    async def run(self, turn: TurnInput) -> TurnResult:
        RUNS[turn.task_id] += 1
        text = text_of(turn)
        if text == "ask":
            return TurnResult(TurnOutcome.INPUT_REQUIRED, reply=(TextBlock("which one?"),))
        if text == "refuse":
            return TurnResult(TurnOutcome.REJECTED, reply=(RefusalBlock(""),))
        if text == "boom":
            raise RuntimeError("agent exploded")
        if text == "mirror":  # gives back every block but the text, as it came
            blocks = tuple(b for b in turn.message.content if not isinstance(b, TextBlock))
            return TurnResult(artifacts=(ArtifactOut(name="mirror", blocks=blocks),))
        seen = len(turn.history)
        return TurnResult(
            reply=(TextBlock(f"echo: {text}"),),
            artifacts=(ArtifactOut(name="echo", blocks=(TextBlock(f"{text} (after {seen})"),)),),
        )


class MiscountingAgent(Agent):
    """The example word counter, broken: it counts one word too many (an eval must notice)."""

    async def run(self, turn: TurnInput) -> TurnResult:
        text = " ".join(b.text for b in turn.message.content if isinstance(b, TextBlock))
        count = len(text.split()) + 1
        return TurnResult(
            reply=(TextBlock(f"Counted {count} words."),),
            artifacts=(ArtifactOut(name="word-count", blocks=(TextBlock(str(count)),)),),
        )


class HoldingAgent(Agent):
    """Holds each turn until the test sets `RELEASE[text]` (or, across processes, until the file
    named by the text exists; `<file>.started` marks the start, `<file>.cancelled` a stop), then
    completes with an artifact. `die` kills the process running it (a poison turn)."""

    async def run(self, turn: TurnInput) -> TurnResult:
        RUNS[turn.task_id] += 1
        text = text_of(turn)
        if text == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if text.startswith("file:"):
            path = Path(text.removeprefix("file:"))
            Path(str(path) + ".started").touch()
            try:
                while not path.exists():
                    await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                Path(str(path) + ".cancelled").touch()
                raise
        else:
            await RELEASE.setdefault(text, asyncio.Event()).wait()
        return TurnResult(
            reply=(TextBlock("done"),),
            artifacts=(ArtifactOut(name="held", blocks=(TextBlock(text),)),),
        )


class SteadyAgent(Agent):
    """`steady:<folder>:<seconds>`: works like a model-driven turn, across processes: writes a
    line with its task id to `<folder>/runs` as it begins (one per run of the agent), waits
    half of `seconds`, says what it does (a store write in the middle of the turn), waits the
    other half, and completes."""

    async def run(self, turn: TurnInput) -> TurnResult:
        _, folder, seconds = text_of(turn).split(":")
        line = f"{turn.task_id}\n".encode()
        descriptor = os.open(Path(folder) / "runs", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, line)  # one write: whole lines, whichever process
        finally:
            os.close(descriptor)
        await asyncio.sleep(float(seconds) / 2)
        await turn.progress(TextBlock("halfway"))
        await asyncio.sleep(float(seconds) / 2)
        return TurnResult(reply=(TextBlock("done"),))


class ProgressAgent(Agent):
    """`steps:<key>`: says what it does, streams an artifact in three quick chunks, says more,
    then holds until `RELEASE[key]` is set (`steps:file:<path>`: until the file exists, for
    servers in other processes) and completes with the artifact whole."""

    async def run(self, turn: TurnInput) -> TurnResult:
        key = text_of(turn).removeprefix("steps:")
        await turn.progress(TextBlock("looking"))
        answer = ArtifactOut(name="answer", blocks=(TextBlock("a"),))
        assert turn.events is not None
        await turn.events.artifact(answer, append=True)
        for chunk in ("b", "c"):
            await turn.events.artifact(
                attrs.evolve(answer, blocks=(TextBlock(chunk),)), append=True
            )
        await turn.progress(TextBlock("writing"))
        if key.startswith("file:"):
            while not Path(key.removeprefix("file:")).exists():
                await asyncio.sleep(0.02)
        else:
            await RELEASE.setdefault(key, asyncio.Event()).wait()
        whole = attrs.evolve(answer, blocks=(TextBlock("abc"),))
        return TurnResult(reply=(TextBlock("done"),), artifacts=(whole,))


class FloodAgent(Agent):
    """`flood:<key>`: streams 40 artifact chunks of 256 KB (10 MB of events, more than any
    socket buffers), then holds until `RELEASE[key]` is set and completes."""

    async def run(self, turn: TurnInput) -> TurnResult:
        key = text_of(turn).removeprefix("flood:")
        assert turn.events is not None
        chunk = ArtifactOut(name="flood", blocks=(TextBlock("x" * 256 * 1024),))
        for _ in range(40):
            await turn.events.artifact(chunk, append=True)
        await RELEASE.setdefault(key, asyncio.Event()).wait()
        return TurnResult(reply=(TextBlock("done"),))


class DirectAgent(Agent):
    """Answers with a direct message, not a task."""

    async def run(self, turn: TurnInput) -> TurnResult:
        return TurnResult(reply=(TextBlock(f"hi, {text_of(turn)}"),), direct_message=True)


CONTEXTS: dict[str, AgentContext] = {}
"""The context each ModelAgent was built with, by tenant."""


class ModelAgent(Agent):
    """Asks its models (with fallback) and answers with what the model said."""

    def __init__(self, context: AgentContext) -> None:
        super().__init__(context)
        CONTEXTS[context.tenant] = context

    async def run(self, turn: TurnInput) -> TurnResult:
        request = ModelRequest((*turn.history, turn.message), system="App words, not core's.")
        response = await respond_with_fallback(self.context.models, request)
        texts = tuple(b for b in response.message.content if isinstance(b, TextBlock))
        return TurnResult(reply=texts, artifacts=(ArtifactOut(response.served_by, texts),))


class NotesAgent(LoopingAgent):
    """A LoopingAgent with the example notes tools; its words are the test's."""

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "You keep notes. " + " ".join(capabilities)

    def agent_config(self) -> LoopingConfig:
        return LoopingConfig(budget=Budget(max_rounds=4), budget_note="Answer now.")

    def agent_tool_families(self) -> Sequence[str]:
        return ["notes"]


@attrs.frozen
class Triage:
    """A ticket's triage."""

    summary: str
    priority: int


class TriageAgent(NotesAgent):
    """Answers in a schema (`Triage`), with the notes tools beside; keeps each structured
    answer it returned in `OUTPUTS` (the app's code sees the type)."""

    output_type = Triage

    async def turn_result(self, turn: TurnInput, result: TurnResult) -> TurnResult:
        OUTPUTS.append(result.output)
        return result


OUTPUTS: list[Any] = []


PAID: list[tuple[str, int, str]] = []
"""Every payment PayingAgent's tool made in this process: (call id, amount, to)."""


@tool(requires_approval=lambda call, arguments: arguments["amount"] > 100)
async def pay(call: ToolCall, amount: int, to: str) -> str:
    """Pay someone."""
    PAID.append((call.id, amount, to))
    marker = os.environ.get("LPT_PAID_FILE")
    if marker:  # another process's test counts the payments here
        with Path(marker).open("a") as paid:
            paid.write(f"{call.id} {amount} {to}\n")
        hold = os.environ.get("LPT_PAY_HOLD_SECONDS")
        if hold:
            await asyncio.sleep(float(hold))
    return f"paid {amount} to {to}"


class PayingAgent(LoopingAgent):
    """Pays with a tool that needs the caller's approval above 100."""

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "You pay people."

    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return [pay]


class ToolsAgent(NotesAgent):
    """A LoopingAgent with every tool family its tenant's plugins offer."""

    def agent_tool_families(self) -> Sequence[str] | None:
        return None


class AskingAgent(NotesAgent):
    """May ask the caller a question (the action's words are the test's)."""

    def agent_config(self) -> LoopingConfig:
        ask = ControlAction(
            "ask_caller", "Ask the caller when something is unclear.", "input_required"
        )
        return LoopingConfig(actions=(ask,))


class OwnModelAgent(NotesAgent):
    """Names its own model (at `LPT_OWN_MODEL_URL`), used when the config names none."""

    def agent_config(self) -> LoopingConfig:
        url = os.environ.get("LPT_OWN_MODEL_URL", "not a url")
        model = TenantModelConfig(model="own", base_url=url, max_retries=0, context_window=4096)
        return LoopingConfig(model=model)


class PlanningAgent(RoundAgent):
    """Delegates to the example notes plugin's subtask type; every word is the test's."""

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Test soul."

    def agent_tool_families(self) -> Sequence[str]:
        return ["notes"]

    def round_policy(self) -> RoundPolicy:
        return RoundPolicy(
            round_contract="Test contract.",
            delegate_description="Test delegate.",
            budget_note="Test budget note.",
            plan_failed="Test plan failed.",
            budget_spent="Test budget spent.",
            canceled="Test canceled.",
            max_parallel=2,
            surface=("summarize-notes",),
        )


class WordlessPlanningAgent(PlanningAgent):
    """Forgets a word of its policy."""

    def round_policy(self) -> RoundPolicy:
        return RoundPolicy(  # type: ignore[call-arg]
            round_contract="Test contract.",
            delegate_description="Test delegate.",
            budget_note="Test budget note.",
            plan_failed="Test plan failed.",
        )


class WrongFamiliesAgent(NotesAgent):
    def agent_tool_families(self) -> Sequence[str]:
        return ["notes", "weather"]


__all__ = [
    "CONTEXTS",
    "RELEASE",
    "RUNS",
    "EchoAgent",
    "HoldingAgent",
    "ModelAgent",
    "NotesAgent",
    "OwnModelAgent",
    "PlanningAgent",
    "WordlessPlanningAgent",
    "WrongFamiliesAgent",
    "text_of",
]
