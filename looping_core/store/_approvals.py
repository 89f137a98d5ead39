"""Tool calls that wait for the caller's approval (migration 13): one row per call, and its way
through `pending` → `approved` | `denied` → `started` → `done`, each step one guarded write.

- `ask`: a turn that ends waiting writes its pending calls first (again after a crash: a call
  already asked for is left as it is).
- `decide` (in the transaction that accepts the caller's answer, `TurnStarts`): every pending
  call of the task decided at once, or nothing written.
- `start`: approved → started, durably, before the call runs; only one writer wins it, on any
  process or machine, so an approved call runs at most once. A call found `started` with no
  result was cut off by a crash: its outcome is unknown.
- `finish`: started → done (a denied call stays denied), once its result is stored: the call
  is ended, nothing is left to do for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from looping_core.content import Decision, ToolApproval
from looping_core.store._errors import ApprovalRefused
from looping_core.store._rows import StoreBase, compact, now_us

__all__ = ["ApprovalStore", "decide_approvals"]


class ApprovalStore(StoreBase):
    """Async approval storage; every call runs on the database's own thread."""

    async def ask(self, task_id: str, approvals: Sequence[ToolApproval]) -> None:
        """Record calls that wait for a decision (a call already recorded stays as it is)."""

        def write() -> None:
            stamp = now_us()
            with self._db.write():
                for approval in approvals:
                    arguments = compact(dict(approval.arguments))
                    self._sql(
                        "INSERT INTO tool_approvals (task_id, call_id, tool, arguments, state,"
                        " reason, asked_ts) VALUES (?, ?, ?, ?, 'pending', '', ?)"
                        " ON CONFLICT (task_id, call_id) DO NOTHING",
                        (task_id, approval.call_id, approval.tool, arguments, stamp),
                    )

        await self._db.run(write)

    async def approvals(self, task_id: str) -> list[ToolApproval]:
        """Every call of the task that needed approval, in the order they were asked for."""

        def read() -> list[ToolApproval]:
            rows = self._sql(
                "SELECT call_id, tool, arguments, state, reason, ended_ts FROM tool_approvals"
                " WHERE task_id = ? ORDER BY asked_ts, call_id",
                (task_id,),
            ).fetchall()
            return [
                ToolApproval(c, t, json.loads(a), s, r or "", ended=e is not None)
                for c, t, a, s, r, e in rows
            ]

        return await self._db.run(read)

    async def start(self, task_id: str, call_id: str) -> bool:
        """Mark an approved call begun, before it runs; `False` (nothing written) unless it
        was approved and not begun yet: then it must not run."""

        def write() -> bool:
            with self._db.write():
                return bool(
                    self._sql(
                        "UPDATE tool_approvals SET state = 'started', started_ts = ?"
                        " WHERE task_id = ? AND call_id = ? AND state = 'approved'",
                        (now_us(), task_id, call_id),
                    ).rowcount
                    == 1
                )

        return await self._db.run(write)

    async def finish(self, task_id: str, call_id: str) -> None:
        """Mark a call's result stored: a begun call is `done`, a denied one stays `denied`;
        both are ended (nothing is left to do for them)."""

        def write() -> None:
            with self._db.write():
                self._sql(
                    "UPDATE tool_approvals SET ended_ts = ?, state = CASE WHEN state ="
                    " 'started' THEN 'done' ELSE state END WHERE task_id = ? AND call_id = ?"
                    " AND state IN ('started', 'denied') AND ended_ts IS NULL",
                    (now_us(), task_id, call_id),
                )

        await self._db.run(write)


def decide_approvals(
    sql: Any, task_id: str, decisions: Sequence[Decision] | None, stamp: int
) -> None:
    """Write the caller's decisions on the task's pending calls (store-thread code, inside the
    transaction that accepts their message): all of them, or `ApprovalRefused` and nothing. No
    decisions and nothing pending: nothing to do."""
    pending = {
        row[0]
        for row in sql(
            "SELECT call_id FROM tool_approvals WHERE task_id = ? AND state = 'pending'",
            (task_id,),
        ).fetchall()
    }
    if decisions is None:
        if pending:
            raise ApprovalRefused(
                "the task waits for decisions on its tool calls "
                f"({', '.join(sorted(pending))}); answer with a toolApprovals data part"
            )
        return
    if not pending:
        raise ApprovalRefused("no tool call of this task waits for a decision (decided already?)")
    given = {decision.call_id for decision in decisions}
    unknown = sorted(given - pending)
    if unknown:
        raise ApprovalRefused(
            f"no pending call of this task has the id {unknown[0]!r} (pending: "
            f"{', '.join(sorted(pending))})"
        )
    missing = sorted(pending - given)
    if missing:
        raise ApprovalRefused(f"decide every pending call at once; missing: {', '.join(missing)}")
    for decision in decisions:
        state = "approved" if decision.approve else "denied"
        written = sql(
            "UPDATE tool_approvals SET state = ?, reason = ?, decided_ts = ?"
            " WHERE task_id = ? AND call_id = ? AND state = 'pending'",
            (state, decision.reason, stamp, task_id, decision.call_id),
        ).rowcount
        if written != 1:  # another answer decided it meanwhile (its transaction came first)
            raise ApprovalRefused(f"call {decision.call_id!r} was decided meanwhile")
