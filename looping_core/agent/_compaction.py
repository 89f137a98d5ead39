"""Compaction: keeping a conversation under its model's context window.

Before each model call the tool loop asks the `Compactor` whether the request would exceed
`compact_at` of the context window. The size is the provider's own count where there is one (the
input tokens it reported for the last call, plus its output) and an estimate for what was added
since; at the start of a turn, and right after a compaction, it is all estimate.

When it would, the oldest messages are displaced: everything before the latest `keep_last` user
turns, cut only where a user turn begins, so a tool call is never parted from its result. The
displaced messages go to the `messages_displaced` listeners (each bounded in time by the plugin
host; none can stop compaction), then leave the session. In their place goes a summary the model
writes with the app's `prompt` as its system text, or nothing (truncation) when the app gives no
prompt or the summary cannot be had. A provider's "context too long" error compacts once more
regardless of the estimate, and the call is tried again once.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import attrs

from looping_core.agent._model import (
    ChatModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolSpec,
    respond_with_fallback,
)
from looping_core.agent._prices import Prices, add_cost
from looping_core.content import (
    Block,
    DataBlock,
    DocumentBlock,
    Message,
    RefusalBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

__all__ = ["Compaction", "Compactor", "DisplacingLog", "displaceable", "estimate_tokens"]

_log = logging.getLogger("looping_core.agent")

CHARS_PER_TOKEN = 4
"""The estimate's rule of thumb for text (English prose averages about four characters a token)."""
MEDIA_TOKENS = 1024
"""What an image, an audio clip or a binary document counts for in the estimate."""
MESSAGE_TOKENS = 4
"""What a message costs beyond its content (role and framing)."""


def _fraction(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{attribute.name} must be above 0 and at most 1, got {value}")


@attrs.frozen
class Compaction:
    """When and how a conversation is compacted.

    - `compact_at`: the fraction of the context window a request may fill before compaction;
    - `keep_last`: the latest user turns that are never displaced (the current one included);
    - `prompt`: the app's instructions for the summary (its system text); empty means the
      displaced messages are dropped without one (truncation);
    - `summary_max_tokens`: the summary's output limit;
    - `listener_timeout`: how long each `messages_displaced` listener may take.
    """

    compact_at: float = attrs.field(default=0.8, validator=_fraction)
    keep_last: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    prompt: str = ""
    summary_max_tokens: int = attrs.field(default=1024, validator=attrs.validators.ge(1))
    listener_timeout: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))


class DisplacingLog(Protocol):
    """A session that can give up its oldest messages (see `SessionLog.displace`)."""

    async def displace(
        self, displaced: Sequence[Message], replacement: Sequence[Message]
    ) -> bool: ...


def estimate_tokens(
    messages: Sequence[Message], system: str = "", tools: Sequence[ToolSpec] = ()
) -> int:
    """A rough, generous token count: text by `CHARS_PER_TOKEN`, media at `MEDIA_TOKENS`."""
    chars = len(system) + sum(
        len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in tools
    )
    media = 0
    for message in messages:
        for block in message.content:
            text, files = _size(block)
            chars += text
            media += files
    return (
        math.ceil(chars / CHARS_PER_TOKEN) + media * MEDIA_TOKENS + MESSAGE_TOKENS * len(messages)
    )


def _size(block: Block) -> tuple[int, int]:
    """(characters of text, media items) of one block."""
    if isinstance(block, TextBlock | ThinkingBlock | RefusalBlock):
        return len(block.text), 0
    if isinstance(block, ToolUseBlock):
        return len(block.name) + len(block.id) + len(json.dumps(dict(block.input))), 0
    if isinstance(block, ToolResultBlock):
        parts = [_size(item) for item in block.content]
        return len(block.tool_use_id) + sum(t for t, _ in parts), sum(m for _, m in parts)
    if isinstance(block, DocumentBlock) and block.text is not None:
        return len(block.text), 0
    if isinstance(block, DataBlock):
        return len(json.dumps(block.value)), 0
    return 0, 1


def displaceable(messages: Sequence[Message], keep_last: int) -> int:
    """How many of the oldest messages may go: all before the latest `keep_last` user turns (0
    when there are not more turns than that). A user turn begins at a user message, never at a
    tool result, so the cut never parts a tool call from its result."""
    starts = [i for i, message in enumerate(messages) if isinstance(message, UserMessage)]
    if len(starts) <= keep_last:
        return 0
    return starts[-keep_last]


class Compactor:
    """Keeps one turn's requests under `compact_at` of `context_window` (no window: only a
    provider's "context too long" error compacts)."""

    def __init__(
        self,
        config: Compaction,
        context_window: int | None,
        models: Sequence[ChatModel],
        *,
        session: DisplacingLog | None = None,
        on_displaced: Callable[[Sequence[Message]], Awaitable[None]] | None = None,
        prices: Prices | None = None,
    ) -> None:
        self._config = config
        self._limit = None if context_window is None else int(config.compact_at * context_window)
        self._models = models
        self._session = session
        self._on_displaced = on_displaced
        self._reported: tuple[int, int] | None = None
        """(messages the provider counted, tokens it reported for them and its answer)."""
        self._prices = prices
        self.usage = Usage()
        """What the summaries used."""
        self.cost: float | None = None
        """What the summaries cost, by `prices` (`None`: none was priced)."""
        self.compactions = 0

    def observe(self, request: ModelRequest, response: ModelResponse) -> None:
        """Take the provider's count of `request` and its answer as the size from now on."""
        usage = response.message.usage
        if usage is not None and usage.total_input_tokens > 0:
            counted = len(request.messages) + 1
            self._reported = (counted, usage.total_input_tokens + usage.output_tokens)

    def estimate(self, request: ModelRequest) -> int:
        """The request's size in tokens: the provider's last count plus an estimate of what was
        added since, or all estimate when there is no count for this conversation."""
        if self._reported is not None and self._reported[0] <= len(request.messages):
            counted, tokens = self._reported
            return tokens + estimate_tokens(request.messages[counted:])
        return estimate_tokens(request.messages, request.system, request.tools)

    def over(self, request: ModelRequest) -> bool:
        return self._limit is not None and self.estimate(request) > self._limit

    async def compact(self, request: ModelRequest) -> tuple[Message, ...]:
        """The request's messages with the oldest displaced (unchanged when none may go)."""
        messages = request.messages
        count = displaceable(messages, self._config.keep_last)
        if count == 0:
            _log.warning(
                "the conversation is over its compaction threshold but holds no more than the "
                "latest %d user turn(s); nothing was displaced",
                self._config.keep_last,
            )
            return messages
        displaced = messages[:count]
        summary = await self._summary(displaced)
        if self._on_displaced is not None:
            await self._on_displaced(displaced)
        replacement: tuple[Message, ...] = (UserMessage((TextBlock(summary),)),) if summary else ()
        if self._session is not None and not await self._session.displace(displaced, replacement):
            _log.warning(
                "the session changed under this turn's compaction (another turn of the same "
                "context); this turn's requests are compacted, the stored session is not"
            )
        self._reported = None
        self.compactions += 1
        _log.info(
            "compacted a conversation: %d message(s) displaced, %s",
            count,
            "summarized" if summary else "truncated",
        )
        return (*replacement, *messages[count:])

    async def _summary(self, displaced: Sequence[Message]) -> str:
        """The model's summary of `displaced` with the app's prompt ("" for truncation)."""
        if not self._config.prompt:
            return ""
        request = ModelRequest(
            messages=tuple(displaced),
            system=self._config.prompt,
            max_output_tokens=self._config.summary_max_tokens,
        )
        try:
            response = await respond_with_fallback(self._models, request, prices=self._prices)
        except ModelError as exc:
            _log.warning("the summary could not be written (%s); truncating instead", exc)
            return ""
        self.usage = self.usage + (response.message.usage or Usage())
        self.cost = add_cost(self.cost, response.message.cost)
        return "".join(b.text for b in response.message.content if isinstance(b, TextBlock))
