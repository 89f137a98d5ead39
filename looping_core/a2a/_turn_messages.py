"""An agent's turn in A2A terms: the messages the runner writes for it, and the task's earlier
messages read back as content for an agent that keeps no session.

The mapping is lossy on purpose, one way: thinking and tool traffic stay inside the agent (they
have no A2A form), and a refusal becomes a text part marked `REFUSAL_METADATA`, so a client can
tell the agent declined from what it said.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from looping_core._random import uuid4
from looping_core.a2a._models import Message, Part, Role, Task
from looping_core.a2a._parts import block_to_part, parts_to_blocks
from looping_core.content import (
    AssistantMessage,
    AudioBlock,
    Block,
    ContentError,
    ImageBlock,
    RefusalBlock,
    TextBlock,
    UserMessage,
)
from looping_core.content import Message as ContentMessage

__all__ = ["REFUSAL_METADATA", "agent_message", "message_content", "reply_parts"]

REFUSAL_METADATA = "looping.refusal"
"""Part metadata key (value `true`) on the text of a refusal block."""


def agent_message(
    parts: Iterable[Part], metadata: Mapping[str, Any] | None = None, *, task: Task | None = None
) -> Message:
    """A new message from the agent (to `task`: its ids set, as a server's messages carry them).
    A message needs a part: with none, `metadata` is its one data part."""
    carried = tuple(parts) or (Part(data=dict(metadata or {})),)
    return Message(
        message_id=str(uuid4()),
        role=Role.ROLE_AGENT,
        parts=carried,
        metadata=dict(metadata) if metadata is not None else None,
        task_id=task.id if task else "",
        context_id=task.context_id if task else "",
    )


def reply_parts(blocks: Iterable[Block]) -> tuple[Part, ...]:
    """The A2A parts of an agent's blocks: those with an A2A form, a refusal marked as one."""
    parts = []
    for block in blocks:
        if isinstance(block, RefusalBlock):
            parts.append(Part(text=block.text, metadata={REFUSAL_METADATA: True}))
            continue
        try:
            parts.append(block_to_part(block))
        except ContentError:
            continue  # thinking and tool traffic stay inside the agent
    return tuple(parts)


def message_content(message: Message) -> ContentMessage | None:
    """A stored A2A message in the content vocabulary (`None` if nothing of it maps): the
    caller's as a user message, the agent's as an assistant message of its text and media."""
    try:
        blocks = parts_to_blocks(message.parts)
    except ContentError:
        return None
    if message.role is Role.ROLE_USER:
        return UserMessage(blocks) if blocks else None
    kept = [b for b in blocks if isinstance(b, TextBlock | ImageBlock | AudioBlock)]
    return AssistantMessage(kept)
