"""The agent bench/jobs.py's recovery run serves: `sleep:<seconds>` sleeps that long, so its turns
are still running when their worker is killed."""

from __future__ import annotations

import asyncio

from looping_core.agent import Agent, TurnInput, TurnResult
from looping_core.content import TextBlock


class SleepAgent(Agent):
    async def run(self, turn: TurnInput) -> TurnResult:
        text = " ".join(b.text for b in turn.message.content if isinstance(b, TextBlock))
        await asyncio.sleep(float(text.removeprefix("sleep:")))
        return TurnResult(reply=(TextBlock("slept"),))
