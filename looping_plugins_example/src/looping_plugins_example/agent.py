"""`WordCountAgent`: a small agent that answers every turn with an artifact.

It exists so the whole path runs end to end with nothing but this distribution: the gateway's
turn arrives, the runner hands it here, the artifact comes back in the task and in the push.
"""

from __future__ import annotations

from looping_core.agent import Agent, ArtifactOut, TurnInput, TurnResult
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
