"""Agents with tools of their own (typed functions), served by the agent tests by reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from looping_core.agent import LoopingAgent
from looping_core.contract import Tool, ToolContext
from looping_core.tools import tool

SEEN: list[tuple[str, str]] = []
"""(tenant, instance_id) of each `whoami` call."""


@tool
def shout(text: Annotated[str, "What to shout"], times: int = 1) -> str:
    """Shout a text."""
    return " ".join([text.upper()] * times)


@tool
async def whoami(context: ToolContext) -> str:
    """Say who is asking."""
    SEEN.append((context.tenant, context.instance_id))
    return context.instance_id


class Shouter(LoopingAgent):
    """An agent with two typed tools of its own and no plugin."""

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return "Shout when asked."

    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return [shout, whoami]


__all__ = ["SEEN", "Shouter", "shout", "whoami"]
