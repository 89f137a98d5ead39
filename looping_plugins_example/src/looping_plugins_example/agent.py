"""Two example agents.

- `WordCountAgent` answers every turn with an artifact and needs nothing else: the whole path
  runs end to end with this distribution alone.
- `NotesKeeper` is a `LoopingAgent`: a model (`[tenants.<id>.model]`) and the notes tool family;
  its soul below is the app's words, as every sentence a model sees must be.
"""

from __future__ import annotations

from collections.abc import Sequence

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

    def agent_plugins(self) -> Sequence[str]:
        return ["notes"]
