"""Model and tool calls in OpenTelemetry's GenAI conventions: the `chat {model}` span's
attributes and metrics, and message content in the conventions' JSON shape, which spans carry
only when the deployment allows it (`[observability] capture_message_content`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from looping_core import _metrics
from looping_core.content import (
    AssistantMessage,
    Block,
    DataBlock,
    DocumentBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    Usage,
    UserMessage,
)

__all__ = [
    "FINISH_REASONS",
    "input_messages",
    "output_messages",
    "record_call",
    "result_text",
    "system_instructions",
    "text_of",
]

MAX_TEXT = 4096
"""Characters of one text a span carries at most (the rest is cut, and says so)."""

FINISH_REASONS = {"end": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
"""Core's stop reasons as the conventions' (OpenAI's) finish reasons; the others as they are."""

_ROLES = {UserMessage: "user", AssistantMessage: "assistant", ToolResultMessage: "tool"}


def record_call(
    provider: str, model: str, usage: Usage | None, seconds: float, error: str = ""
) -> None:
    """The GenAI client metrics of one `chat` call."""
    labels = {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": provider,
        "gen_ai_request_model": model,
    }
    _metrics.GENAI_OPERATION_SECONDS.observe(seconds, error_type=error, **labels)
    if usage is not None:
        for kind, tokens in (("input", usage.total_input_tokens), ("output", usage.output_tokens)):
            _metrics.GENAI_TOKEN_USAGE.observe(tokens, gen_ai_token_type=kind, **labels)


def text_of(text: str) -> str:
    """`text`, cut at `MAX_TEXT` characters."""
    if len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]}... ({len(text) - MAX_TEXT} more characters)"


def result_text(result: ToolResultBlock) -> str:
    """A tool result's text parts, as a span carries them (cut at `MAX_TEXT`)."""
    return text_of("".join(b.text for b in result.content if isinstance(b, TextBlock)))


def system_instructions(system: str) -> str | None:
    """`gen_ai.system_instructions`: the app's system text."""
    return json.dumps([{"type": "text", "content": text_of(system)}]) if system else None


def input_messages(messages: Sequence[Message]) -> str:
    """`gen_ai.input.messages`: the conversation sent, as the conventions shape it."""
    return json.dumps([_message(m) for m in messages], ensure_ascii=False)


def output_messages(message: AssistantMessage, stop_reason: str) -> str:
    """`gen_ai.output.messages`: the model's answer."""
    shaped = _message(message)
    shaped["finish_reason"] = FINISH_REASONS.get(stop_reason, stop_reason)
    return json.dumps([shaped], ensure_ascii=False)


def _message(message: Message) -> dict[str, Any]:
    role = _ROLES.get(type(message), "system")
    return {"role": role, "parts": [_part(block) for block in message.content]}


def _part(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "content": text_of(block.text)}
    if isinstance(block, ThinkingBlock):
        return {"type": "reasoning", "content": text_of(block.text)}
    if isinstance(block, ToolUseBlock):
        return {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": dict(block.input),
        }
    if isinstance(block, ToolResultBlock):
        return {"type": "tool_call_response", "id": block.tool_use_id, "result": result_text(block)}
    if isinstance(block, DataBlock):
        return {"type": "text", "content": text_of(json.dumps(block.value))}
    if isinstance(block, DocumentBlock) and block.text:
        return {"type": "text", "content": text_of(block.text)}
    # Images, audio, a document's bytes: their kind, never their bytes.
    return {"type": block.TAG}
