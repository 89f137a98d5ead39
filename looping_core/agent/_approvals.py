"""Settling the tool calls the caller decided on, at the start of the turn their answer began.

The turn that asked ended with the calls in the session without results. The caller's answer
(its decisions, written by the edge with the message) begins this turn; before the model is
asked again, every decided call gets its result, in one write to the session:

- a denied call never runs: its result says it was denied, with the caller's reason;
- an approved call is marked begun, durably, then run (`ApprovalLog.start`): only one run, on
  any process, ever gets to do that, so it runs at most once;
- a call found begun with no stored result was cut off by a crash: it is not run again (its
  result says its outcome is unknown) unless its tool is idempotent.

The answer's own words (text beside the decisions), if any, follow the results as a user
message. A turn resumed after the results were stored finds nothing left to settle.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence

from looping_core.agent._resume import tool_result_ids
from looping_core.agent._seam import ApprovalLog, SessionLog
from looping_core.agent._tool_calls import call_tool, error_result
from looping_core.content import (
    Message,
    ToolApproval,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    UserMessage,
    is_approvals_part,
)
from looping_core.contract import Tool, ToolContext

__all__ = ["DENIED", "OUTCOME_UNKNOWN", "gives_decisions", "settle_approvals"]

DENIED = "not run: denied by the caller"
"""The result of a denied call (the caller's reason follows it)."""
OUTCOME_UNKNOWN = "not run again: it began before a crash and its outcome is unknown"
"""The result of an approved call a crash cut off after it began (its tool not idempotent)."""


def gives_decisions(message: UserMessage) -> bool:
    """Whether the message answers calls that wait for approval: only a turn it begins has
    any to settle (the edge accepts no other message to a task that waits for decisions), so
    no other turn reads the approvals."""
    return any(is_approvals_part(block) for block in message.content)


async def settle_approvals(
    log: ApprovalLog,
    session: SessionLog,
    message: UserMessage,
    tools: Sequence[Tool],
    *,
    context: ToolContext,
    timeout: float,
    max_parallel: int,
) -> tuple[Message, ...] | None:
    """The conversation to go on from once every decided call has its result (stored in the
    session), or `None` when no decided call is left to settle."""
    decided = [a for a in await log.approvals() if a.state != "pending" and not a.ended]
    if not decided:
        return None
    history = await session.history()
    stored = tool_result_ids(history)
    called = [b.id for m in history for b in m.content if isinstance(b, ToolUseBlock)]
    order = {call_id: index for index, call_id in enumerate(called)}
    # Results in the order the model called them (the calls were asked for together).
    todo = sorted(
        (a for a in decided if a.call_id not in stored),
        key=lambda a: order.get(a.call_id, len(order)),
    )
    by_name = {tool.name: tool for tool in tools}
    slots = asyncio.Semaphore(max_parallel)
    run = functools.partial(call_tool, tools=by_name, timeout=timeout, slots=slots, context=context)
    results = await asyncio.gather(*(_settled(a, log, by_name, run) for a in todo))
    added: list[Message] = []
    if results:
        added.append(ToolResultMessage(results))
        said = tuple(b for b in message.content if not is_approvals_part(b))
        if said:
            added.append(UserMessage(said))
        await session.append(added)
    for approval in decided:
        await log.finish(approval.call_id)
    return (*history, *added) if added else None


async def _settled(
    approval: ToolApproval,
    log: ApprovalLog,
    tools: Mapping[str, Tool],
    run: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]],
) -> ToolResultBlock:
    call = ToolUseBlock(approval.call_id, approval.tool, dict(approval.arguments))
    if approval.state == "denied":
        reason = f" ({approval.reason})" if approval.reason else ""
        return error_result(call, DENIED + reason)
    if approval.state == "approved" and await log.start(approval.call_id):
        return await run(call)
    tool = tools.get(approval.tool)
    if tool is not None and tool.idempotent:
        return await run(call)
    return error_result(call, OUTCOME_UNKNOWN)
