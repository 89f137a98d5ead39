"""Models for `looping model serve --model note_models:...` in the served tests."""

from __future__ import annotations

from looping_core.agent import ModelRequest
from looping_core.content import TextBlock, ToolResultMessage
from looping_core.modelserver import ModelReply, ToolCall


def take_note(request: ModelRequest) -> ModelReply | str:
    """Keeps what the caller said as a note (`add_note`), then says so."""
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return "Noted."
    text = "".join(b.text for b in last.content if isinstance(b, TextBlock))  # type: ignore[union-attr]
    return ModelReply(tool_calls=(ToolCall("add_note", {"text": text}),))
