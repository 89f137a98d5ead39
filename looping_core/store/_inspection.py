"""Everything stored about one task, for its owner's development console (`[server]
inspection`): the task, its numbered events, the conversation its turns added to the caller's
session, its plan's subtasks with each subagent's conversation, and its pushes with their
delivery attempts. One read, scoped like every other: a task of another caller is not found.
"""

from __future__ import annotations

import json
from typing import Any

from looping_core.a2a import to_wire
from looping_core.contract import Identity
from looping_core.store._outbox import outbox_rows
from looping_core.store._retention import SUBAGENT_SEPARATOR
from looping_core.store._rows import StoreBase

__all__ = ["TaskInspection"]


class TaskInspection(StoreBase):
    """Read-only; every call runs on the database's own thread."""

    async def inspect(self, caller: Identity, task_id: str) -> dict[str, Any]:
        """The task as JSON-ready parts; `TaskNotFound` unless `caller` owns it."""
        return await self._db.read(self._inspect, caller, task_id)

    def _inspect(self, caller: Identity, task_id: str) -> dict[str, Any]:
        head = self._owned(caller, task_id)
        task = self._snapshot(task_id, None, include_artifacts=True, head=head)
        events = [
            {"seq": int(seq), "atUs": int(created), "event": json.loads(body)}
            for seq, body, created in self._sql(
                "SELECT seq, body, created_ts FROM task_events WHERE task_id = ? ORDER BY seq",
                (task_id,),
            ).fetchall()
        ]
        prefix = SUBAGENT_SEPARATOR.join((head.context_id, task_id, ""))
        return {
            "task": to_wire(task),
            "owner": {"tenant": caller.tenant, "issuer": caller.issuer, "subject": caller.subject},
            "events": events,
            "conversation": self._conversation(caller, head.context_id, task_id),
            "subtasks": self._subtasks(caller, task_id, prefix),
            "pushes": outbox_rows(self._sql, task_id),
        }

    def _conversation(
        self, caller: Identity, context_id: str, task_id: str | None
    ) -> list[dict[str, Any]]:
        """The session's messages (only the task's, when `task_id` is given) with their turn;
        a summary that replaced older messages belongs to no task, and is shown too."""
        rows = self._sql(
            "SELECT m.position, m.body, m.turn, m.task_id, m.created_ts"
            " FROM session_messages m JOIN sessions s ON s.id = m.session_id"
            " WHERE s.tenant = ? AND s.issuer = ? AND s.subject = ? AND s.context_id = ?"
            " ORDER BY m.position",
            (caller.tenant, caller.issuer, caller.subject, context_id),
        ).fetchall()
        return [
            {
                "position": int(position),
                "turn": turn,
                "summary": owner is None,
                "atUs": int(created),
                "message": json.loads(body),
            }
            for position, body, turn, owner, created in rows
            if task_id is None or owner in (task_id, None)
        ]

    def _subtasks(self, caller: Identity, task_id: str, prefix: str) -> list[dict[str, Any]]:
        rows = self._sql(
            "SELECT subtask_id, type_key, params, depends_on, round, state, result, reason,"
            " attempts, fingerprint, wave, usage, created_ts, started_ts, ended_ts"
            " FROM subtasks WHERE task_id = ? ORDER BY seq",
            (task_id,),
        ).fetchall()
        contexts = {
            context: context[len(prefix) :]
            for (context,) in self._sql(
                "SELECT context_id FROM sessions WHERE tenant = ? AND issuer = ? AND subject = ?"
                " AND substr(context_id, 1, ?) = ?",
                (caller.tenant, caller.issuer, caller.subject, len(prefix), prefix),
            ).fetchall()
        }
        found = []
        for row in rows:
            (subtask_id, type_key, params, depends_on, round_, state, result, reason, attempts,
             fingerprint, wave, usage, created, started, ended) = row  # fmt: skip
            # The subagent's session of the attempt that ran last (its scope names the
            # fingerprint it was run with).
            scope = f"{subtask_id}@{(fingerprint or '')[:16]}"
            context = next((c for c, s in contexts.items() if s == scope), None)
            found.append(
                {
                    "id": subtask_id,
                    "type": type_key,
                    "params": json.loads(params),
                    "dependsOn": json.loads(depends_on),
                    "round": int(round_),
                    "state": state,
                    "result": None if result is None else json.loads(result),
                    "reason": reason,
                    "attempts": int(attempts),
                    "wave": wave,
                    "usage": None if usage is None else json.loads(usage),
                    "createdUs": int(created),
                    "startedUs": started,
                    "endedUs": ended,
                    "conversation": [] if context is None else self._conversation(
                        caller, context, None
                    ),
                }
            )  # fmt: skip
        return found
