"""What a `LoopingAgent`'s turn reports of itself in the task's metadata: its usage, the models
that served it, its rounds and cost, a spent budget, compactions, and the tool calls the model
made (`looping.toolCalls`, bounded so a turn of many or large calls stays small)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from looping_core.agent._loop import LoopOutcome
from looping_core.content import AssistantMessage, Message, ToolUseBlock

__all__ = ["MAX_REPORTED_ARGUMENTS", "MAX_REPORTED_CALLS", "tool_calls_of", "turn_report"]

MAX_REPORTED_CALLS = 100
"""Tool calls a turn's `looping.toolCalls` lists at most (the first ones)."""
MAX_REPORTED_ARGUMENTS = 2048
"""Bytes of a call's arguments (as compact JSON) it carries at most; larger ones are left out."""


def tool_calls_of(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The tool calls the model made in `messages`, in order: each one's id, name and (when
    small) arguments, for `looping.toolCalls`."""
    calls: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        for block in message.content:
            if isinstance(block, ToolUseBlock) and len(calls) < MAX_REPORTED_CALLS:
                call: dict[str, Any] = {"id": block.id, "name": block.name}
                arguments = json.dumps(dict(block.input), separators=(",", ":"))
                if len(arguments.encode()) <= MAX_REPORTED_ARGUMENTS:
                    call["arguments"] = dict(block.input)
                calls.append(call)
    return calls


def turn_report(outcome: LoopOutcome) -> dict[str, Any]:
    """The task's metadata for a turn the loop ran to `outcome`."""
    report: dict[str, Any] = {
        "looping.usage": attrs.asdict(outcome.usage),
        "looping.models": list(outcome.served_by),
        "looping.rounds": outcome.rounds,
    }
    if outcome.cost is not None:
        report["looping.cost"] = outcome.cost
    if outcome.exhausted is not None:
        report["looping.budgetSpent"] = outcome.exhausted
    if outcome.compactions:
        report["looping.compactions"] = outcome.compactions
    calls = tool_calls_of(outcome.messages)
    if calls:
        report["looping.toolCalls"] = calls
    return report
