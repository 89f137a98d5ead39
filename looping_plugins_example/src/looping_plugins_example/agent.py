"""Two example agents.

- `WordCountAgent` answers every turn with an artifact and needs nothing else: the whole path
  runs end to end with this distribution alone.
- `NotesKeeper` is a `LoopingAgent`: a model (`[tenants.<id>.model]`) and the notes tool family;
  its soul below is the app's words, as every sentence a model sees must be.
- `NotesPlanner` is a `RoundAgent`: it may delegate `summarize-notes` subtasks (the notes
  plugin's subtask type) to subagents, with the round policy's words below.
- `TicketTriage` answers in a schema: every turn ends with a `Triage` (a data part, for the
  program that routes tickets), checked against its schema before the caller sees it.
- `RefundDesk` acts only with consent: its `refund` tool waits for the caller's approval of
  each call (the turn ends asking), and runs at most once when approved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import attrs

from looping_core.agent import (
    Agent,
    ArtifactOut,
    Budget,
    Compaction,
    LoopingAgent,
    LoopingConfig,
    TurnInput,
    TurnResult,
)
from looping_core.content import TextBlock
from looping_core.contract import Tool, ToolCall, ToolContext
from looping_core.delegation import RoundAgent, RoundPolicy
from looping_core.tools import tool


class WordCountAgent(Agent):
    """Counts the words of the user's text and returns the count as an artifact."""

    async def run(self, turn: TurnInput) -> TurnResult:
        text = " ".join(b.text for b in turn.message.content if isinstance(b, TextBlock))
        count = len(text.split())
        return TurnResult(
            reply=(TextBlock(f"Counted {count} words."),),
            artifacts=(ArtifactOut(name="word-count", blocks=(TextBlock(str(count)),)),),
        )


class NotesKeeper(LoopingAgent):
    """Keeps the caller's notes with the example notes tools."""

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return (
            "You keep notes for the person you talk to. When they tell you something to "
            "remember, add it as a note; when they ask what they told you, list the notes and "
            "answer from them. Be brief. What you can do: " + " ".join(capabilities)
        )

    def agent_config(self) -> LoopingConfig:
        return LoopingConfig(
            budget=Budget(max_rounds=6, max_seconds=60),
            budget_note="You are out of time: answer now with what you have.",
            compaction=Compaction(
                prompt=(
                    "Summarize the conversation above for yourself in a few sentences: what the "
                    "person asked you to remember and what is still open. Facts only."
                ),
            ),
        )

    def agent_tool_families(self) -> Sequence[str]:
        return ["notes"]


class NotesPlanner(RoundAgent):
    """Splits a request about many topics into one summary per topic, run by subagents."""

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return (
            "You answer questions about the notes of the person you talk to. "
            "What you can do: " + " ".join(capabilities)
        )

    def agent_tool_families(self) -> Sequence[str]:
        return ["notes"]

    def round_policy(self) -> RoundPolicy:
        return RoundPolicy(
            round_contract=(
                "When a question spans several topics, call delegate once with one "
                "summarize-notes subtask per topic, then answer from their results. Answer "
                "directly when one look at the notes is enough."
            ),
            delegate_description="Run subtasks on helpers in dependency order; get their results.",
            budget_note="You have no more rounds: answer now from what the subtasks gave you.",
            plan_failed="I could not put the summaries together this time. Please try again.",
            budget_spent="I ran out of time before I could answer. Please ask again.",
            canceled="Stopped, as you asked.",
            max_parallel=3,
            surface=("summarize-notes",),
        )


@attrs.frozen
class Triage:
    """A support ticket, triaged."""

    summary: Annotated[str, "The ticket in one line"]
    urgency: Literal["low", "normal", "urgent"]
    team: Literal["facilities", "it", "billing"]


class TicketTriage(LoopingAgent):
    """Triages each ticket it is sent into a `Triage`."""

    output_type = Triage

    def agent_tool_families(self) -> Sequence[str]:
        return ()  # no tools: it only answers

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return (
            "You triage support tickets. Read the ticket and give your triage with the "
            "final_answer tool: the ticket in one line, how urgent it is, and which team "
            "should take it."
        )


@tool
def order_status(order: Annotated[str, "The order's number"]) -> str:
    """Look up an order's status."""
    return f"order {order}: delivered"


@tool(requires_approval=True)
def refund(
    call: ToolCall,
    order: Annotated[str, "The order's number"],
    amount: Annotated[int, "How much, in cents"],
) -> str:
    """Refund an order. The person you talk to approves every refund before it is made."""
    return f"refunded {amount} cents on order {order} (refund {call.id})"


class RefundDesk(LoopingAgent):
    """Looks orders up and refunds them, each refund approved by the caller first."""

    def agent_soul(self, capabilities: Sequence[str]) -> str:
        return (
            "You handle refunds. Look the order up, then refund it with the refund tool; the "
            "person you talk to approves each refund before it is made. Say what was done."
        )

    def agent_tool_families(self) -> Sequence[str]:
        return ()  # its own tools only

    def agent_tools(self, context: ToolContext) -> Sequence[Tool]:
        return [order_status, refund]
