"""The push outbox: pushes queued in the same transaction as the state change they report, read
back when due, and every delivery attempt recorded. A stored config that cannot be delivered
(written by an earlier release) is queued as failed, with the reason as its one attempt.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from looping_core import _tracing
from looping_core._random import uuid4
from looping_core.a2a.internal import printable
from looping_core.store._jobs import JobTicket
from looping_core.store._push_configs import opened_settings, target_verdict
from looping_core.store._rows import StoreBase, compact, now_us
from looping_core.store._secrets import SecretsUnreadable

__all__ = ["Outbox", "OutboxItem", "PendingPushes", "outbox_rows", "task_head"]

_log = logging.getLogger("looping_core.push")

_ATTEMPT = "(outbox_id, attempt, at_ts, status, error, duration_ms) VALUES (?, ?, ?, ?, ?, ?)"
_CHANGE = "SET attempts = ?, state = ?, next_attempt_ts = COALESCE(?, next_attempt_ts) WHERE id = ?"


@attrs.frozen
class OutboxItem:
    id: int
    task_id: str
    config_id: str
    jti: str
    url: str
    body: bytes
    attempts: int
    created_ts: int
    token: str
    authentication: tuple[str, str] | None
    traceparent: str | None = None
    """The trace of the change it reports, which its delivery continues."""


@attrs.frozen
class PendingPushes:
    next_due_ts: int | None
    oldest_ts: int | None


class Outbox(StoreBase):
    """Queueing pushes (store thread), and what the deliverer reads and records."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._push_listeners: list[Callable[[], None]] = []

    def watch_pushes(self, listener: Callable[[], None]) -> None:
        """Call `listener()` on the event loop after a write of this process queued pushes
        (the embedded deliverer's wake: most writes queue none, and a look costs two
        statements)."""
        self._push_listeners.append(listener)

    def pushes_written(self, queued: list[OutboxItem]) -> None:
        """After the commit of a write that queued `queued` (none: nobody is told)."""
        if queued:
            for listener in self._push_listeners:
                listener()

    def task_body(
        self,
        task_id: str,
        context_id: str,
        status: str,
        metadata: str | None,
        *,
        artifacts: Sequence[str] | None = None,
    ) -> str:
        """The push of a task as a write just left it (store thread): a `StreamResponse` whose
        task is spliced from the JSON the write holds (its status and metadata) and its
        artifacts' JSON (`artifacts`, in order, when the write knows them all; else read), with
        no history; the same bytes as encoding the task read back, without reading the row or
        decoding a value."""
        if artifacts is None:
            artifacts = [
                body
                for (body,) in self._sql(
                    "SELECT body FROM artifacts WHERE task_id = ? ORDER BY seq", (task_id,)
                ).fetchall()
            ]
        fields = [task_head(task_id, context_id, status)]
        if artifacts:
            fields.append(f'"artifacts":[{",".join(artifacts)}]')
        if metadata is not None:
            fields.append(f'"metadata":{metadata}')
        return '{"task":{' + ",".join(fields) + "}}"

    def opened_pushes(
        self,
        task_id: str,
        rows: Sequence[Sequence[Any]],
        body: str,
        stamp: int,
        trace: str | None,
    ) -> list[OutboxItem]:
        """The pushes a write queued in SQL (`EndAlone`; store thread, after its commit) as the
        deliverer takes them, their configs' secrets opened. `rows`: each one's outbox id,
        config id, jti, URL and config body. One whose secrets cannot be opened is failed, as
        it would have been queued."""
        queued = []
        for outbox_id, config_id, jti, url, config in rows:
            try:
                settings = opened_settings(self._secrets, task_id, config_id, json.loads(config))
            except SecretsUnreadable as exc:
                self._fail_undeliverable(outbox_id, 0, str(exc))
                continue
            row = (outbox_id, task_id, config_id, jti, url, body, 0, stamp)
            queued.append(_item(row, settings, trace))
        return queued

    def queue_pushes(
        self,
        task_id: str,
        queued: list[OutboxItem],
        body: str,
        *,
        for_job: bool = False,
        configs: Sequence[Sequence[Any]] | None = None,
    ) -> None:
        """Queue a push of `body` (a `StreamResponse`'s compact JSON) to each of the task's
        configs, and add each pending one to `queued`. Each gets a job of the job engine (if
        any) now, unless `for_job`: then the job making this write delivers them (a delivery to
        try again is deferred then). `configs`: the configs' rows (`config_id`, `body`,
        `target_checked`, `undeliverable`, in order), when the write read them already."""
        if configs is None:
            configs = self._sql(
                "SELECT config_id, body, target_checked, undeliverable FROM push_configs"
                " WHERE task_id = ? ORDER BY seq",
                (task_id,),
            ).fetchall()
        if not configs:
            return
        stamp = now_us()
        trace = _tracing.traceparent()  # the job runs in its caller's context
        for raw_config_id, config, checked, verdict in configs:
            settings = json.loads(config)
            config_id, url = printable(raw_config_id), printable(settings.get("url", ""))
            try:
                settings = opened_settings(self._secrets, task_id, raw_config_id, settings)
            except SecretsUnreadable as exc:
                problems = str(exc)
            else:
                problems = target_verdict(
                    self._sql, task_id, raw_config_id, settings, checked=checked, verdict=verdict
                )
            jti = str(uuid4())
            # A config the edge refuses today may have been stored by an earlier release. It is
            # queued as failed, with the reason as its one attempt, so the terminal write that
            # queues it still commits and the other configs' pushes still go out.
            (outbox_id,) = self._sql(
                "INSERT INTO push_outbox (task_id, config_id, jti, url, body, state, attempts,"
                " next_attempt_ts, created_ts, node, worker, traceparent)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    task_id,
                    config_id,
                    jti,
                    url,
                    body,
                    "failed" if problems else "pending",
                    1 if problems else 0,
                    stamp,
                    stamp,
                    self._node,
                    self._worker,
                    trace,
                ),
            ).fetchone()
            if problems:
                self._sql(
                    "INSERT INTO push_attempts (outbox_id, attempt, at_ts, status, error,"
                    " duration_ms) VALUES (?, 1, ?, NULL, ?, 0)",
                    (outbox_id, stamp, f"undeliverable config: {problems}"),
                )
                continue
            if not for_job:
                self._queue_push(outbox_id)
            row = (outbox_id, task_id, config_id, jti, url, body, 0, stamp)
            queued.append(_item(row, settings, trace))

    async def due_pushes(self, limit: int = 32) -> list[OutboxItem]:
        """This process's pending deliveries that are due, with their config's credentials."""

        def read() -> list[OutboxItem]:
            return self._items(
                " WHERE o.node = ? AND o.worker = ? AND o.state = 'pending'"
                " AND o.next_attempt_ts <= ? ORDER BY o.next_attempt_ts LIMIT ?",
                (self._node, self._worker, now_us(), limit),
            )

        return await self._db.run(read)

    async def untried_pushes(self, task_id: str) -> list[OutboxItem]:
        """The task's pending pushes of the task itself (an end, a question to the caller: not
        progress, which has jobs of their own) never tried yet: what a job engine's turn job
        delivers when its turn's end did not say (the job runs again after its worker died,
        or the end's commit lost its answer)."""

        def read() -> list[OutboxItem]:
            return self._items(
                " WHERE o.task_id = ? AND o.state = 'pending' AND o.attempts = 0"
                " AND substr(o.body, 1, 8) = ? ORDER BY o.id",
                (task_id, '{"task":'),
            )

        return await self._db.run(read)

    async def pending_push(self, outbox_id: int) -> OutboxItem | None:
        """The push `outbox_id` if it is still pending, whoever queued it (a job engine's
        delivery job); `None` once it is done with, or its config was deleted."""

        def read() -> OutboxItem | None:
            items = self._items(" WHERE o.id = ? AND o.state = 'pending'", (outbox_id,))
            return items[0] if items else None

        return await self._db.run(read)

    def _items(self, where: str, params: tuple[Any, ...]) -> list[OutboxItem]:
        """Outbox rows with their config's credentials (store thread); a row whose config was
        deleted since is dropped: nothing more is sent there."""
        rows = self._sql(
            "SELECT o.id, o.task_id, o.config_id, o.jti, o.url, o.body, o.attempts,"
            " o.created_ts, c.body, o.traceparent, c.target_checked, c.undeliverable"
            " FROM push_outbox o LEFT JOIN push_configs c"
            " ON c.task_id = o.task_id AND c.config_id = o.config_id" + where,
            params,
        ).fetchall()
        items = []
        for found in rows:
            row, (config, trace, checked, verdict) = tuple(found[:8]), found[8:]
            row_id, task_id, config_id, *_, tries, _ = row
            if config is None:
                self._sql("UPDATE push_outbox SET state = 'dropped' WHERE id = ?", (row_id,))
                continue
            settings = opened_settings(self._secrets, task_id, config_id, json.loads(config))
            problems = target_verdict(
                self._sql, task_id, config_id, settings, checked=checked, verdict=verdict
            )
            if problems:
                # Queued by an older release, to a config it let in: failed once, recorded.
                self._fail_undeliverable(row_id, tries, problems)
                continue
            items.append(_item(row, settings, trace))
        return items

    def _fail_undeliverable(self, outbox_id: int, attempts: int, problems: str) -> None:
        _log.warning("push %s: undeliverable config (%s); failed", outbox_id, problems)
        with self._db.write():
            self._sql(
                "UPDATE push_outbox SET state = 'failed', attempts = ? WHERE id = ?",
                (attempts + 1, outbox_id),
            )
            self._sql(
                "INSERT INTO push_attempts (outbox_id, attempt, at_ts, status, error,"
                " duration_ms) VALUES (?, ?, ?, NULL, ?, 0)",
                (outbox_id, attempts + 1, now_us(), f"undeliverable config: {problems}"),
            )

    async def pending_pushes(self) -> PendingPushes:
        """When the next of this process's pending pushes is due, and when the oldest was
        queued (µs since the epoch; `None` when none is pending)."""

        def read() -> PendingPushes:
            due, oldest = self._sql(
                "SELECT MIN(next_attempt_ts), MIN(created_ts) FROM push_outbox"
                " WHERE node = ? AND worker = ? AND state = 'pending'",
                (self._node, self._worker),
            ).fetchone()
            return PendingPushes(
                next_due_ts=int(due) if due is not None else None,
                oldest_ts=int(oldest) if oldest is not None else None,
            )

        return await self._db.run(read)

    async def record_attempt(
        self,
        item: OutboxItem,
        *,
        status: int | None,
        error: str | None,
        duration_ms: int,
        outcome: str,
        next_attempt_ts: int | None = None,
        job: JobTicket | None = None,
    ) -> bool:
        """Record one delivery attempt; `outcome` is the item's new state (`pending` to retry).
        `job`: the engine's job that made it. A pending item's next attempt then gets a push
        job in the same transaction, unless it is this job's own push (it runs again); and the
        job's last write finishes the job in it, unless its own push is to be tried again.
        `next_attempt_ts` is kept in one place: the row's, for the embedded deliverer; with a
        job, the engine's job holds it (the row keeps its first). Returns whether this write
        finished the job."""
        own = job is not None and job.push == item.id
        retry = outcome == "pending"
        row_due = next_attempt_ts if job is None else None
        attempt = (item.id, item.attempts + 1, now_us(), status, error, duration_ms)
        change = (item.attempts + 1, outcome, row_due, item.id)

        def write() -> bool:
            with self._db.write():
                self._sql(f"INSERT INTO push_attempts {_ATTEMPT}", attempt)
                self._sql(f"UPDATE push_outbox {_CHANGE}", change)
                if job is None:
                    return False
                if retry and not own:
                    self._queue_push(item.id, next_attempt_ts)
                return job.last and not (retry and own) and self._end_job(job)

        finish = None if retry or job is None or not job.last else self._job_done_call(job)
        if finish is None:
            return await self._db.run(write)
        call, arguments = finish

        def write_at_once() -> bool:
            # The job's last write, done: one statement, its own transaction (PostgreSQL's
            # data-modifying WITH), one round trip instead of five.
            self._sql(
                f"WITH attempt AS (INSERT INTO push_attempts {_ATTEMPT}),"
                f" outbox AS (UPDATE push_outbox {_CHANGE}) SELECT {call}",
                (*attempt, *change, *arguments),
            )
            return True

        return await self._db.run_alone(write_at_once)

    async def outbox(self, task_id: str) -> list[dict[str, Any]]:
        """The outbox rows of a task with their attempts (for `looping tasks` and tests)."""
        return await self._db.run(outbox_rows, self._sql, task_id)


def task_head(task_id: str, context_id: str, status: str) -> str:
    """A task push body's first fields: its id, context and status (`status`: its JSON)."""
    return f'"id":{compact(task_id)},"contextId":{compact(context_id)},"status":{status}'


def outbox_rows(sql: Callable[..., Any], task_id: str) -> list[dict[str, Any]]:
    """Each queued push of a task (its jti, config, where it goes, its state) with its
    attempts, oldest first; never the config's token or credentials. Store-thread code: `sql`
    runs one statement (`Database.execute`)."""
    pushes = []
    for row_id, jti, config_id, url, state, created in sql(
        "SELECT id, jti, config_id, url, state, created_ts FROM push_outbox"
        " WHERE task_id = ? ORDER BY id",
        (task_id,),
    ).fetchall():
        attempts = [
            {"attempt": int(n), "atUs": int(at), "status": status, "error": error,
             "durationMs": duration}
            for n, at, status, error, duration in sql(
                "SELECT attempt, at_ts, status, error, duration_ms FROM push_attempts"
                " WHERE outbox_id = ? ORDER BY attempt",
                (row_id,),
            ).fetchall()
        ]  # fmt: skip
        pushes.append(
            {"jti": jti, "configId": config_id, "url": url, "state": state,
             "createdUs": int(created), "attempts": attempts}
        )  # fmt: skip
    return pushes


def _item(
    row: tuple[int, str, str, str, str, str, int, int],
    settings: dict[str, Any],
    traceparent: str | None,
) -> OutboxItem:
    """An outbox row (id, task, config, jti, url, body, attempts, created) as the deliverer
    takes it, with its config's credentials."""
    row_id, task_id, config_id, jti, url, body, attempts, created_ts = row
    auth = settings.get("authentication")
    credentials = (auth["scheme"], auth.get("credentials", "")) if auth else None
    return OutboxItem(
        id=row_id, task_id=task_id, config_id=config_id, jti=jti, url=url, body=body.encode(),
        attempts=attempts, created_ts=created_ts, token=settings.get("token", ""),
        authentication=credentials, traceparent=traceparent,
    )  # fmt: skip
