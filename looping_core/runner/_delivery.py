"""Delivering pending pushes from the durable outbox: each a signed `POST` (`PushSigner`), with a
timeout, exponential backoff with jitter, bounded attempts and age, every attempt recorded.
Pending items survive restarts (they are rows); an item that can never be delivered is failed
and recorded, never retried forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

import aiohttp
import attrs

from looping_core import _metrics, _tracing
from looping_core.a2a import SIGNATURE_HEADER, TOKEN_HEADER, PushSigner
from looping_core.a2a.internal import PUSH_CONTENT_TYPE
from looping_core.config import PushConfig
from looping_core.runner._ports import PushOutbox
from looping_core.store.internal import JobTicket, OutboxItem, now_us

__all__ = ["Attempt", "PushDeliverer"]

_log = logging.getLogger("looping_core.push")


@attrs.frozen
class Attempt:
    """What one attempt of a job engine's job did."""

    again_in: float | None
    """Seconds until the next attempt when the push is to be tried again; `None` when it is
    done with (delivered, failed or expired)."""
    job_finished: bool
    """Whether its record finished the job (`JobTicket.last`)."""


class PushDeliverer:
    """Delivers pending outbox items: timeout, exponential backoff with jitter, bounded attempts
    and age, every attempt recorded. Pending items survive restarts (they are rows)."""

    def __init__(
        self,
        store: PushOutbox,
        session: aiohttp.ClientSession,
        signer: PushSigner,
        policy: PushConfig,
        *,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._store = store
        self._session = session
        self._signer = signer
        self._policy = policy
        self._jitter = jitter
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """Deliver this process's pushes (the embedded runner's), woken as writes queue them."""
        self._store.watch_pushes(self._queued)
        self._task = asyncio.create_task(self._loop(), name="looping-push-deliverer")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Stop delivering; whatever was not delivered stays queued for the next start."""
        if self._task is not None:
            self._stopping = True
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _queued(self) -> None:
        """A write of this process queued pushes (and committed): look now."""
        self.wake()

    def wake(self) -> None:
        """New items were queued: look now instead of at the next due time."""
        self._wake.set()

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self.deliver_due()
                pending = await self._store.pending_pushes()
                due = pending.next_due_ts
                oldest = pending.oldest_ts
                age = (now_us() - oldest) / 1_000_000 if oldest is not None else 0.0
                _metrics.PUSH_OLDEST_PENDING.set(max(0.0, age))
            except asyncio.CancelledError:
                raise
            except Exception:
                _log.exception("push delivery loop failed; retrying")
                due = now_us() + 1_000_000
            delay = 5.0 if due is None else max(0.0, (due - now_us()) / 1_000_000)
            if self._stopping:
                break
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # races the event being set.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(delay, 5.0)):
                    await self._wake.wait()

    async def deliver_due(self) -> int:
        """Attempt every due item once; returns how many were attempted.

        One item's failure, even an unexpected one, never keeps the others from their attempt.
        """
        items = await self._store.due_pushes()
        outcomes = await asyncio.gather(
            *(self._deliver(item) for item in items), return_exceptions=True
        )
        for item, outcome in zip(items, outcomes, strict=True):
            if isinstance(outcome, Exception):
                _log.error(
                    "push %s for task %s: recording its attempt failed",
                    item.jti, item.task_id, exc_info=outcome,
                )  # fmt: skip
        return len(items)

    async def deliver(self, item: OutboxItem, job: JobTicket) -> Attempt:
        """One attempt, made by the job engine's `job` (the store's `record_attempt` says what
        its record does for the job)."""
        _, next_ts, finished = await self._deliver(item, job)
        again_in = None if next_ts is None else max(0.0, (next_ts - now_us()) / 1_000_000)
        return Attempt(again_in, finished)

    async def _deliver(
        self, item: OutboxItem, job: JobTicket | None = None
    ) -> tuple[str, int | None, bool]:
        """One attempt, in a span continuing the trace of the change the push reports; the
        item's state afterwards, when it is due again (µs) if it is still pending, and whether
        its record finished `job`."""
        carrier = {"traceparent": item.traceparent} if item.traceparent else None
        with _tracing.span(
            "push", kind="client", carrier=carrier, a2a__task_id=item.task_id,
            looping__push__attempt=item.attempts + 1,
        ) as span:  # fmt: skip
            outcome, next_ts, finished = await self._attempt(item, job)
            span.set(looping__push__outcome=outcome)
            if outcome != "delivered":
                span.fail(outcome)
            if outcome != "pending":
                _metrics.PUSH_DELIVERIES.inc(outcome=outcome)
        return outcome, next_ts, finished

    async def _attempt(
        self, item: OutboxItem, job: JobTicket | None
    ) -> tuple[str, int | None, bool]:
        """Attempt and record the delivery; the item's state afterwards, when it is due again
        if it is still pending, and whether the record finished `job`."""

        async def record(
            outcome: str, *, status: int | None, error: str | None, duration_ms: int,
            next_ts: int | None = None,
        ) -> tuple[str, int | None, bool]:  # fmt: skip
            finished = await self._store.record_attempt(
                item, status=status, error=error, duration_ms=duration_ms, outcome=outcome,
                next_attempt_ts=next_ts, job=job,
            )  # fmt: skip
            return outcome, next_ts, finished

        # Its target was checked once, at the edge or as an older release's row was first
        # read (`target_verdict`): an item here can be sent.
        scheme, credentials = item.authentication or (None, "")
        headers = {"Content-Type": PUSH_CONTENT_TYPE}
        _tracing.inject(headers)
        if scheme is not None:
            headers["Authorization"] = f"{scheme} {credentials}".strip()
        if item.token:
            headers[TOKEN_HEADER] = item.token
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        try:
            headers[SIGNATURE_HEADER] = self._signer.sign(
                url=item.url, task_id=item.task_id, jti=item.jti, body=item.body
            )
            async with self._session.post(
                item.url,
                data=item.body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self._policy.timeout_seconds),
                allow_redirects=False,
            ) as response:
                status = response.status
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = type(exc).__name__
        except Exception as exc:
            _metrics.PUSH_ATTEMPTS.inc(result="error")
            # Not the receiver's fault and not a network failure: a bug here. Failed and
            # recorded, so it cannot be retried forever or hold up the items behind it.
            _log.exception("push %s for task %s could not be sent", item.jti, item.task_id)
            return await record(
                "failed", status=None, error=f"internal: {type(exc).__name__}",
                duration_ms=int((time.monotonic() - started) * 1000),
            )  # fmt: skip
        _metrics.PUSH_ATTEMPTS.inc(result=f"{status // 100}xx" if status else "error")
        duration_ms = int((time.monotonic() - started) * 1000)
        if status is not None and 200 <= status < 300:
            return await record("delivered", status=status, error=None, duration_ms=duration_ms)
        attempts = item.attempts + 1
        age = (now_us() - item.created_ts) / 1_000_000
        if attempts >= self._policy.max_attempts:
            outcome, next_ts = "failed", None
        elif age >= self._policy.max_age_seconds:
            outcome, next_ts = "expired", None
        else:
            outcome, next_ts = "pending", now_us() + int(self._backoff(attempts) * 1_000_000)
        _log.warning(
            "push %s for task %s: attempt %d got %s; %s",
            item.jti, item.task_id, attempts, status or error, outcome,
        )  # fmt: skip
        return await record(
            outcome, status=status, error=error, duration_ms=duration_ms, next_ts=next_ts
        )

    def _backoff(self, attempts: int) -> float:
        """Exponential, capped, with "equal jitter": between half and all of the step."""
        step = min(
            self._policy.backoff_max_seconds, self._policy.backoff_seconds * 2 ** (attempts - 1)
        )
        return float(step / 2 + step / 2 * self._jitter())
