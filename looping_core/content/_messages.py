"""Messages: who said which blocks. A conversation is an ordered list of them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import attrs

from looping_core.content._blocks import (
    AudioBlock,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    RefusalBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from looping_core.content._usage import Usage

__all__ = [
    "MESSAGE_TYPES",
    "AssistantContent",
    "AssistantMessage",
    "Conversation",
    "Message",
    "SystemMessage",
    "ToolResultMessage",
    "UserContent",
    "UserMessage",
]

UserContent = TextBlock | ImageBlock | AudioBlock | DocumentBlock | DataBlock
AssistantContent = TextBlock | ImageBlock | AudioBlock | ThinkingBlock | ToolUseBlock | RefusalBlock


def _as_tuple(blocks: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(blocks)


def _only(*allowed: type[Any]) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        for block in value:
            if not isinstance(block, allowed):
                raise ValueError(f"a {instance.ROLE} message cannot hold a {type(block).__name__}")

    return check


def _not_empty(instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    if not value:
        raise ValueError(f"a {instance.ROLE} message needs at least one block")


@attrs.frozen
class UserMessage:
    ROLE: ClassVar[str] = "user"
    content: tuple[UserContent, ...] = attrs.field(
        converter=_as_tuple,
        validator=[_only(TextBlock, ImageBlock, AudioBlock, DocumentBlock, DataBlock), _not_empty],
    )


@attrs.frozen
class AssistantMessage:
    ROLE: ClassVar[str] = "assistant"
    content: tuple[AssistantContent, ...] = attrs.field(
        converter=_as_tuple,
        validator=_only(
            TextBlock, ImageBlock, AudioBlock, ThinkingBlock, ToolUseBlock, RefusalBlock
        ),
    )
    usage: Usage | None = None
    cost: float | None = attrs.field(default=None, validator=lambda i, a, v: _cost(v))
    """What the call that produced it cost, by the deployment's `[prices]` (absent: the model
    has no price there)."""


def _cost(value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("cost must be a number")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError("cost must be a finite number from 0 up")


@attrs.frozen
class SystemMessage:
    ROLE: ClassVar[str] = "system"
    content: tuple[TextBlock, ...] = attrs.field(
        converter=_as_tuple, validator=[_only(TextBlock), _not_empty]
    )


@attrs.frozen
class ToolResultMessage:
    """The results of one assistant turn's tool calls, sent back to the model."""

    ROLE: ClassVar[str] = "tool"
    content: tuple[ToolResultBlock, ...] = attrs.field(
        converter=_as_tuple, validator=[_only(ToolResultBlock), _not_empty]
    )


Message = UserMessage | AssistantMessage | SystemMessage | ToolResultMessage
Conversation = Sequence[Message]

MESSAGE_TYPES: dict[str, type[Any]] = {
    cls.ROLE: cls for cls in (UserMessage, AssistantMessage, SystemMessage, ToolResultMessage)
}
