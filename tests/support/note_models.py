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


_CONVERSATIONS = [0]


def forgets_one_in_five(request: ModelRequest) -> ModelReply | str:
    """As `take_note`, except that every fifth conversation it answers without taking the
    note: a model that varies, deterministically."""
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return "Noted."
    _CONVERSATIONS[0] += 1
    if _CONVERSATIONS[0] % 5 == 0:
        return "Sorry, I forgot."
    text = "".join(b.text for b in last.content if isinstance(b, TextBlock))  # type: ignore[union-attr]
    return ModelReply(tool_calls=(ToolCall("add_note", {"text": text}),))


def notes_and_grades(request: ModelRequest) -> ModelReply | str:
    """As `take_note` for the agent; for a judge (its system text says so), a grade: PASS when
    the answer it is shown says Noted."""
    if request.system.startswith("You grade"):
        last = request.messages[-1]
        shown = "".join(b.text for b in last.content if isinstance(b, TextBlock))  # type: ignore[union-attr]
        return "PASS" if "Answer: Noted." in shown else "FAIL: it did not confirm"
    return take_note(request)
