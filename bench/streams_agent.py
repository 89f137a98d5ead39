"""The agent bench/streams.py serves: `emit:<count>:<interval_ms>:<gate file>` waits until the
gate file exists (its subscribers are connected), then reports `count` progress events
`interval_ms` apart, each a data part with the wall-clock time it was reported."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from looping_core.agent import Agent, TurnInput, TurnResult
from looping_core.content import DataBlock, TextBlock


class EmitterAgent(Agent):
    async def run(self, turn: TurnInput) -> TurnResult:
        text = " ".join(b.text for b in turn.message.content if isinstance(b, TextBlock))
        _, count, interval_ms, gate = text.split(":", 3)
        while not Path(gate).exists():
            await asyncio.sleep(0.01)
        interval = int(interval_ms) / 1000
        start = time.perf_counter()
        for n in range(int(count)):
            await turn.progress(DataBlock({"n": n, "sent": time.time()}))
            # On a schedule, not after each write: a slow store shows as delay, not fewer events.
            await asyncio.sleep(max(0.0, start + (n + 1) * interval - time.perf_counter()))
        return TurnResult(reply=(TextBlock(f"reported {count} events"),))
