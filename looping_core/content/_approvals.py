"""Tool calls that wait for the caller's approval, as conversation content.

A turn whose model called a tool that needs approval ends `INPUT_REQUIRED`; its status message
holds one data part asking for the decisions (`approval_request`):

    {"toolApprovals": {"pending": [{"callId": "c1", "tool": "pay", "arguments": {...}}]}}

The caller answers on the same task with a message holding one data part of decisions, one for
each pending call (`decisions_in` reads it):

    {"toolApprovals": {"decisions": [{"callId": "c1", "approve": true},
                                     {"callId": "c2", "approve": false, "reason": "not now"}]}}

A decision's `reason` (a denial's, optional) is the caller's words, passed to the model. The
shapes are checked strictly: an unknown key, a missing one or a wrong type is an
`ApprovalsInvalid` naming where.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from looping_core.content._blocks import Block, DataBlock
from looping_core.errors import LoopingError

__all__ = [
    "APPROVALS_KEY",
    "APPROVAL_STATES",
    "MAX_DECISION_REASON",
    "ApprovalsInvalid",
    "Decision",
    "ToolApproval",
    "approval_request",
    "decisions_in",
    "is_approvals_part",
]

APPROVALS_KEY = "toolApprovals"
"""The key of the data part that asks for, or gives, decisions on tool calls."""

APPROVAL_STATES = ("pending", "approved", "denied", "started", "done")
"""A call's way: asked for, decided (approved or denied), begun (durably, before the call),
ended (its result stored)."""

MAX_DECISION_REASON = 2000
"""The longest reason a caller may give for a denial, in characters."""

MAX_DECISIONS = 256
"""The most decisions one message may carry."""


class ApprovalsInvalid(LoopingError, ValueError):
    """A `toolApprovals` part of the wrong shape: `where` is the path inside the part's data."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


@attrs.frozen
class Decision:
    """The caller's decision on one pending call."""

    call_id: str
    approve: bool
    reason: str = ""


@attrs.frozen
class ToolApproval:
    """A tool call that needed approval, as stored: the call, its state (`APPROVAL_STATES`),
    and a denial's reason."""

    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    state: str = attrs.field(default="pending", validator=attrs.validators.in_(APPROVAL_STATES))
    reason: str = ""
    ended: bool = False
    """Its result (the tool's, or the denial) is stored: nothing is left to do for it."""


def approval_request(approvals: Sequence[ToolApproval]) -> DataBlock:
    """The data part that asks the caller to decide on `approvals`."""
    pending = [
        {"callId": a.call_id, "tool": a.tool, "arguments": dict(a.arguments)} for a in approvals
    ]
    return DataBlock({APPROVALS_KEY: {"pending": pending}})


def is_approvals_part(block: Block) -> bool:
    """Whether `block` is a `toolApprovals` data part (asking for decisions, or giving them)."""
    return (
        isinstance(block, DataBlock)
        and isinstance(block.value, Mapping)
        and APPROVALS_KEY in block.value
    )


def decisions_in(blocks: Sequence[Block]) -> tuple[int, list[Decision]] | None:
    """The decisions a message's blocks give (with the index of the block that gives them), or
    `None` when none of its blocks is a `toolApprovals` part. `ApprovalsInvalid` when one is of
    the wrong shape, or two are given."""
    found = [(index, block) for index, block in enumerate(blocks) if is_approvals_part(block)]
    if not found:
        return None
    if len(found) > 1:
        raise ApprovalsInvalid(APPROVALS_KEY, "give the decisions in one part, not several")
    index, block = found[0]
    assert isinstance(block, DataBlock)
    return index, _decisions(block.value)


def _decisions(value: Mapping[str, Any]) -> list[Decision]:
    extra = sorted(set(value) - {APPROVALS_KEY})
    if extra:
        raise ApprovalsInvalid(extra[0], f"unknown key beside {APPROVALS_KEY}")
    body = value[APPROVALS_KEY]
    if not isinstance(body, Mapping) or set(body) != {"decisions"}:
        raise ApprovalsInvalid(APPROVALS_KEY, 'must be an object with "decisions" only')
    items = body["decisions"]
    where = f"{APPROVALS_KEY}.decisions"
    if not isinstance(items, list) or not items:
        raise ApprovalsInvalid(where, "must be a non-empty list")
    if len(items) > MAX_DECISIONS:
        raise ApprovalsInvalid(where, f"at most {MAX_DECISIONS} decisions")
    decisions = [_decision(item, f"{where}[{index}]") for index, item in enumerate(items)]
    seen: set[str] = set()
    for index, decision in enumerate(decisions):
        if decision.call_id in seen:
            raise ApprovalsInvalid(f"{where}[{index}].callId", "decided twice")
        seen.add(decision.call_id)
    return decisions


def _decision(item: Any, where: str) -> Decision:
    if not isinstance(item, Mapping):
        raise ApprovalsInvalid(where, "must be an object")
    unknown = sorted(set(item) - {"callId", "approve", "reason"})
    if unknown:
        raise ApprovalsInvalid(f"{where}.{unknown[0]}", "unknown key")
    call_id, approve, reason = item.get("callId"), item.get("approve"), item.get("reason", "")
    if not isinstance(call_id, str) or not call_id or len(call_id) > 256:
        raise ApprovalsInvalid(f"{where}.callId", "must be a call id (1-256 characters)")
    if not isinstance(approve, bool):
        raise ApprovalsInvalid(f"{where}.approve", "must be true or false")
    if not isinstance(reason, str) or len(reason) > MAX_DECISION_REASON:
        raise ApprovalsInvalid(
            f"{where}.reason", f"must be text of at most {MAX_DECISION_REASON} characters"
        )
    return Decision(call_id, approve, reason)
