"""The model of `support.agents:PayingAgent` for tests that serve it as a process (`looping
model serve --model support.payer_model:model`): it pays bob 250 (a call that waits for the
caller's approval), then says what the results were."""

from __future__ import annotations

from looping_core.agent import ModelRequest
from looping_core.content import ToolResultMessage
from looping_core.testing import FunctionModel, ModelReply, ToolCall


def _payer(request: ModelRequest) -> ModelReply | str:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if results:
        return " | ".join(r.text for r in results[-1].content)
    return ModelReply(tool_calls=(ToolCall("pay", {"amount": 250, "to": "bob"}),))


model = FunctionModel(_payer)
