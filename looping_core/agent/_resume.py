"""Where a turn starts from in the caller's durable session: a fresh turn's message joins it;
a turn resumed after a crash continues from its last durable step (tool calls whose results are
stored are not run again; an answer already stored is not asked for again)."""

from __future__ import annotations

from collections.abc import Sequence

from looping_core.agent._seam import SessionLog
from looping_core.content import (
    AssistantMessage,
    Message,
    ToolResultMessage,
    ToolUseBlock,
    UserMessage,
)

__all__ = ["resume_conversation", "tool_result_ids"]


async def resume_conversation(
    session: SessionLog | None,
    message: UserMessage,
    history: Sequence[Message] = (),
    *,
    new_session: bool = False,
) -> tuple[tuple[Message, ...], tuple[ToolUseBlock, ...], AssistantMessage | None]:
    """Where a turn starts from: the conversation, the tool calls still without results, and the
    final answer if the turn (resumed after a crash) already has one. A fresh turn's `message`
    joins `session` here; without a session the conversation is `history` and `message`.
    `new_session`: the caller knows the session was never written (nothing to read back)."""
    if session is None:
        return (*history, message), (), None
    if new_session:
        await session.append([message])
        return (message,), (), None
    if not await session.this_turn():
        past = await session.history()
        await session.append([message])
        return (*past, message), (), None
    conversation = tuple(await session.history())
    found = [(i, m) for i, m in enumerate(conversation) if isinstance(m, AssistantMessage)]
    if not found:
        return conversation, (), None
    at, asked = found[-1]
    after = conversation[at + 1 :]
    calls = tuple(b for b in asked.content if isinstance(b, ToolUseBlock))
    if not calls:
        return conversation, (), (None if after else asked)
    answered = tool_result_ids(after)
    # Calls whose results were never stored run now (their handlers get the same call ids).
    return conversation, tuple(c for c in calls if c.id not in answered), None


def tool_result_ids(messages: Sequence[Message]) -> set[str]:
    """The tool calls among `messages` that have results."""
    return {
        block.tool_use_id
        for message in messages
        if isinstance(message, ToolResultMessage)
        for block in message.content
    }
