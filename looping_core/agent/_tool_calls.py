"""Running one tool call: its arguments checked, its handler run under a timeout and given the
call it serves (plugin contract 3), what it returns made content; and whether a call must first wait
for the caller's approval. Nothing a handler does crashes a turn: an exception, a timeout or a
value with no content form is an error result with a terse fact (the words a model is told to
act on are the app's)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import rfc8785

from looping_core import _metrics, _tracing
from looping_core.agent._telemetry import result_text
from looping_core.content import (
    AudioBlock,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from looping_core.contract import Tool, ToolCall, ToolContext, ToolError
from looping_core.tools import SchemaUnusable, argument_problems

__all__ = [
    "NOT_APPROVABLE",
    "NOT_TAKEN_WAITING",
    "argument_problem",
    "call_tool",
    "error_result",
    "needs_approval",
]

_log = logging.getLogger("looping_core.agent")

_RESULT_BLOCKS = (TextBlock, ImageBlock, AudioBlock, DocumentBlock, DataBlock)


NOT_APPROVABLE = "not run: it needs the caller's approval, which cannot be asked for here"
"""The result of a call that needs approval in a loop that cannot ask for it (a subagent's)."""
NOT_TAKEN_WAITING = "not taken: other calls wait for the caller's approval"
"""The result of a control action called beside calls that wait for approval."""


def needs_approval(
    call: ToolUseBlock, tools: Mapping[str, Tool], context: ToolContext | None
) -> bool:
    """Whether the call must wait for the caller's approval: its tool requires it (always, or
    by its rule). A call that cannot run anyway (an unknown tool, arguments that fail the
    schema) does not: it gets its error result. A rule that raises counts as yes."""
    tool = tools.get(call.name)
    if tool is None or not tool.requires_approval:
        return False
    if argument_problem(call, tool.input_schema) is not None:
        return False
    rule = tool.requires_approval
    if rule is True:
        return True
    try:
        return bool(rule(ToolCall(call.id, call.name, context), call.input))
    except Exception:
        _log.warning("tool %s: its approval rule failed; the call waits", call.name, exc_info=True)
        return True


def argument_problem(call: ToolUseBlock, schema: Mapping[str, Any]) -> str | None:
    """What is wrong with the call's arguments (`None`: nothing); a schema that cannot be used
    is a problem of the call too, never a failed turn."""
    try:
        return argument_problems(schema, call.input)
    except SchemaUnusable as exc:
        _log.error("tool %s cannot be called: its input schema is unusable: %s", call.name, exc)
        return f"tool {call.name} cannot be called (its input schema is unusable)"


async def call_tool(
    call: ToolUseBlock,
    tools: Mapping[str, Tool],
    timeout: float,
    slots: asyncio.Semaphore,
    context: ToolContext | None,
) -> ToolResultBlock:
    # A name the model made up is not a label value: labels stay the tools that exist.
    name = call.name if call.name in tools else "unknown"
    with _tracing.gen_ai_span(
        "execute_tool",
        name,
        gen_ai__tool__name=name,
        gen_ai__tool__call__id=call.id,
        gen_ai__tool__type="function",
    ) as span:
        capture = _tracing.capturing_content()
        if capture:
            span.set(gen_ai__tool__call__arguments=json.dumps(dict(call.input)))
        result = await _run_tool(call, tools, timeout, slots, context)
        outcome = "error" if result.is_error else "ok"
        if result.is_error:
            span.set(error__type="tool_error")
            span.fail("the tool call failed")
        elif capture:
            span.set(gen_ai__tool__call__result=result_text(result))
    _metrics.TOOL_CALLS.inc(tool=name, outcome=outcome)
    return result


async def _run_tool(
    call: ToolUseBlock,
    tools: Mapping[str, Tool],
    timeout: float,
    slots: asyncio.Semaphore,
    context: ToolContext | None,
) -> ToolResultBlock:
    tool = tools.get(call.name)
    if tool is None:
        return error_result(call, f"unknown tool: {call.name}")
    problem = argument_problem(call, tool.input_schema)
    if problem is not None:
        return error_result(call, problem)
    async with slots:
        try:
            async with asyncio.timeout(timeout):
                value = await tool.handler(call.input, ToolCall(call.id, call.name, context))
        except TimeoutError:
            _log.warning("tool %s (call %s) timed out after %g s", call.name, call.id, timeout)
            return error_result(call, f"timed out after {timeout:g} s")
        except ToolError as exc:
            return error_result(call, exc.message)
        except Exception as exc:
            _log.warning("tool %s (call %s) failed", call.name, call.id, exc_info=True)
            return error_result(call, f"failed: {type(exc).__name__}")
    try:
        return ToolResultBlock(call.id, _content(value))
    except (TypeError, ValueError):
        _log.warning("tool %s returned a %s", call.name, type(value).__name__)
        return error_result(call, f"returned a value with no content form ({type(value).__name__})")


def _content(value: Any) -> tuple[Any, ...]:
    """A tool's return value as tool-result content: text, blocks, or JSON text."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (TextBlock(value),)
    if isinstance(value, _RESULT_BLOCKS):
        return (value,)
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(item, _RESULT_BLOCKS) for item in value)
    ):
        return tuple(value)
    return (TextBlock(rfc8785.dumps(json.loads(json.dumps(value))).decode("utf-8")),)


def error_result(call: ToolUseBlock, text: str) -> ToolResultBlock:
    return ToolResultBlock(call.id, (TextBlock(text),), is_error=True)
