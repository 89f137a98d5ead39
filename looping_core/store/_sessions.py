"""Durable sessions: one per verified caller and conversation (tenant, issuer, subject, A2A
`contextId`), a sequence of content messages stored in the codec's canonical JSON.

Every method takes the `SessionRef` itself, never an id a caller could guess: a session is
reachable only by the caller and context it belongs to. An append is one transaction, so a step
is either wholly durable or not at all; positions only grow, and concurrent appends to one
session (several workers, several connections) queue on the session's row and each get their
own positions. Compaction (`displace`) removes the oldest messages and may put replacements
(a summary) in their place; it returns what it removed, in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import peewee

from looping_core.content import Message, decode_message, encode
from looping_core.contract import SessionRef
from looping_core.store._rows import StoreBase, new_id, now_us

__all__ = ["SessionStore"]

_APPEND_TRIES = 3
_ROWS_PER_INSERT = 100
"""Messages one INSERT of an append carries at most (SQLite caps the values of a statement)."""


class SessionStore(StoreBase):
    """Async session storage; every call runs on the database's own thread."""

    @property
    def _row_locks(self) -> bool:
        return isinstance(self._db.peewee, peewee.PostgresqlDatabase)

    async def append(
        self,
        session: SessionRef,
        messages: Sequence[Message],
        *,
        task_id: str | None = None,
        turn: str | None = None,
    ) -> int:
        """Add `messages` at the end, in one transaction, as the task's and the turn's (the
        messageId that started it); returns the session's length."""
        for attempt in range(_APPEND_TRIES):
            try:
                return await self._db.run(self._append, session, tuple(messages), task_id, turn)
            except peewee.IntegrityError:
                # Another connection created this session at the same moment; this transaction
                # rolled back, and the next try finds (and locks) that session.
                if attempt == _APPEND_TRIES - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _append(
        self,
        session: SessionRef,
        messages: tuple[Message, ...],
        task_id: str | None,
        turn: str | None,
    ) -> int:
        with self._db.write():
            session_id = self._session_id(session, create=True, lock=True)
            assert session_id is not None
            # Read before writing, under the session's lock (or SQLite's one writer): nothing
            # else adds to the session meanwhile, so its length after is this count plus ours.
            last, count = self._sql(
                "SELECT MAX(position), COUNT(*) FROM session_messages WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if not messages:
                return int(count)
            first = 0 if last is None else int(last) + 1
            stamp = now_us()
            rows = [
                (session_id, first + index, encode(message).decode("utf-8"), task_id, turn, stamp)
                for index, message in enumerate(messages)
            ]
            for start in range(0, len(rows), _ROWS_PER_INSERT):
                chunk = rows[start : start + _ROWS_PER_INSERT]
                self._sql(
                    "INSERT INTO session_messages (session_id, position, body, task_id, turn,"
                    " created_ts) VALUES " + ", ".join("(?, ?, ?, ?, ?, ?)" for _ in chunk),
                    [value for row in chunk for value in row],
                )
            return int(count) + len(rows)

    async def history(self, session: SessionRef) -> list[Message]:
        """The session's messages in order (empty for a session that has none yet)."""
        return [message for message, _ in await self.entries(session)]

    async def entries(self, session: SessionRef) -> list[tuple[Message, str | None]]:
        """The session's messages in order, each with the turn that added it (its messageId)."""
        return await self._db.query(self._entries, session)  # one statement

    def _entries(self, session: SessionRef) -> list[tuple[Message, str | None]]:
        caller = session.caller
        rows = self._sql(
            "SELECT m.body, m.turn FROM sessions s"
            " JOIN session_messages m ON m.session_id = s.id"
            " WHERE s.tenant = ? AND s.issuer = ? AND s.subject = ? AND s.context_id = ?"
            " ORDER BY m.position",
            (caller.tenant, caller.issuer, caller.subject, session.context_id),
        ).fetchall()
        return [(decode_message(body), turn) for body, turn in rows]

    async def displace(
        self,
        session: SessionRef,
        count: int,
        replacement: Sequence[Message] = (),
        *,
        expected: Sequence[Message] | None = None,
    ) -> list[Message]:
        """Remove the oldest `count` messages and put `replacement` (at most as many) in their
        place, in one transaction; returns the removed messages in order.

        With `expected`, only if the oldest messages are exactly those (compared in canonical
        form); otherwise nothing changes and the result is empty."""
        if len(replacement) > count:
            raise ValueError("a replacement cannot be longer than what it replaces")
        bodies = None if expected is None else tuple(encode(m).decode("utf-8") for m in expected)
        return await self._db.run(self._displace, session, count, tuple(replacement), bodies)

    def _displace(
        self,
        session: SessionRef,
        count: int,
        replacement: tuple[Message, ...],
        expected: tuple[str, ...] | None,
    ) -> list[Message]:
        with self._db.write():
            session_id = self._session_id(session, create=False, lock=True)
            if session_id is None or count <= 0:
                return []
            rows = self._sql(
                "SELECT position, body FROM session_messages WHERE session_id = ?"
                " ORDER BY position LIMIT ?",
                (session_id, count),
            ).fetchall()
            if not rows or (expected is not None and tuple(b for _, b in rows) != expected):
                return []
            through = int(rows[-1][0])
            self._sql(
                "DELETE FROM session_messages WHERE session_id = ? AND position <= ?",
                (session_id, through),
            )
            stamp = now_us()
            first = through - len(replacement) + 1
            for offset, message in enumerate(replacement):
                self._sql(
                    "INSERT INTO session_messages (session_id, position, body, task_id,"
                    " created_ts) VALUES (?, ?, ?, NULL, ?)",
                    (session_id, first + offset, encode(message).decode("utf-8"), stamp),
                )
            return [decode_message(body) for _, body in rows]

    def _session_id(self, session: SessionRef, *, create: bool, lock: bool = False) -> str | None:
        """The session's row id (made when `create`). With `lock`, on PostgreSQL, the row stays
        locked until the transaction ends, so appends to one session queue instead of racing
        for positions (SQLite has one writer at a time anyway)."""
        caller = session.caller
        scope = (caller.tenant, caller.issuer, caller.subject, session.context_id)
        locking = " FOR UPDATE" if lock and self._row_locks else ""
        row = self._sql(
            "SELECT id FROM sessions"
            f" WHERE tenant = ? AND issuer = ? AND subject = ? AND context_id = ?{locking}",
            scope,
        ).fetchone()
        if row is not None:
            return str(row[0])
        if not create:
            return None
        session_id = new_id()
        self._sql(
            "INSERT INTO sessions (id, tenant, issuer, subject, context_id, created_ts)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, *scope, now_us()),
        )
        return session_id
