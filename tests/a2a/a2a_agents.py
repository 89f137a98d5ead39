"""Agents for the edge and runner tests (importable as `a2a_agents:Name`)."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

from looping_core.agent import Agent, ArtifactOut, TurnInput, TurnOutcome, TurnResult
from looping_core.content import RefusalBlock, TextBlock

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
        seen = len(turn.history)
        return TurnResult(
            reply=(TextBlock(f"echo: {text}"),),
            artifacts=(ArtifactOut(name="echo", blocks=(TextBlock(f"{text} (after {seen})"),)),),
        )


class HoldingAgent(Agent):
    """Holds each turn until the test sets `RELEASE[text]` (or, across processes, until the file
    named by the text exists; `<file>.started` marks the start, `<file>.cancelled` a stop), then
    completes with an artifact."""

    async def run(self, turn: TurnInput) -> TurnResult:
        RUNS[turn.task_id] += 1
        text = text_of(turn)
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


__all__ = ["RELEASE", "RUNS", "EchoAgent", "HoldingAgent", "text_of"]
