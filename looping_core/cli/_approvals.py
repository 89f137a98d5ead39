"""Answering a task that waits for the caller's approval of tool calls, from `looping send`:
the calls it waits for (read from its status message), the decisions part the flags make, and
the questions asked in a terminal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from looping_core.content import APPROVALS_KEY
from looping_core.gateway.internal import pending_calls

__all__ = ["asked_decisions", "decisions_part", "pending_lines"]


def pending_lines(task: dict[str, Any], tenant: str) -> tuple[list[str], str | None]:
    """What a person reads of the calls a task waits for, and how to answer (for stderr)."""
    waiting = pending_calls(task)
    if not waiting:
        return [], None
    lines = [
        f"waits for approval: {call.get('callId')}  {call.get('tool')} "
        f"{json.dumps(call.get('arguments'), ensure_ascii=False)}"
        for call in waiting
    ]
    hint = (
        f"answer with: looping send --tenant {tenant} --task {task['id']} --approve CALL_ID "
        "(or --deny CALL_ID --reason ...; 'all' for every call)"
    )
    return lines, hint


def decisions_part(
    waiting: Sequence[dict[str, Any]], approved: Sequence[str], denied: Sequence[str], reason: str
) -> dict[str, Any]:
    """The data part deciding every call the task waits for, as the flags say; a usage error
    naming what is wrong (an id it does not wait for, one decided both ways, one left out)."""
    ids = [str(call.get("callId")) for call in waiting]
    if not ids:
        raise click.UsageError("the task waits for no tool call to be approved")
    approve = set(ids) if "all" in approved else set(approved)
    deny = set(ids) if "all" in denied else set(denied)
    unknown = sorted((approve | deny) - set(ids))
    if unknown:
        raise click.UsageError(
            f"the task waits for no call {', '.join(unknown)} (it waits for {', '.join(ids)})"
        )
    both = sorted(approve & deny)
    if both:
        raise click.UsageError(f"{', '.join(both)}: approved and denied at once")
    left = [call_id for call_id in ids if call_id not in approve | deny]
    if left:
        raise click.UsageError(
            f"decide every call the task waits for; left out: {', '.join(left)} (--approve or "
            "--deny)"
        )
    decisions = [_decision(call_id, call_id in approve, reason) for call_id in ids]
    return {"data": {APPROVALS_KEY: {"decisions": decisions}}}


def asked_decisions(waiting: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The data part of decisions asked of the person at the terminal, call by call."""
    decisions = []
    for call in waiting:
        arguments = json.dumps(call.get("arguments"), ensure_ascii=False)
        approve = click.confirm(f"Approve {call.get('tool')} {arguments}?", default=False)
        reason = ""
        if not approve:
            reason = click.prompt("Why not (optional)", default="", show_default=False)
        decisions.append(_decision(str(call.get("callId")), approve, reason))
    return {"data": {APPROVALS_KEY: {"decisions": decisions}}}


def _decision(call_id: str, approve: bool, reason: str) -> dict[str, Any]:
    decision: dict[str, Any] = {"callId": call_id, "approve": approve}
    if reason and not approve:
        decision["reason"] = reason
    return decision
