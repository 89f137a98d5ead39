"""Fairness at the edge: `[limits]` per tenant and per caller, checked on every binding after
the caller is verified and before anything is read or written for it.

- **Request rate** (`caller_requests_per_second`, `tenant_requests_per_second`): a token bucket
  per caller and one per tenant, in this process. A request takes one token from both or, if
  either is empty, from neither and is refused with `RATE_LIMITED` (HTTP 429) and a
  `Retry-After` of the seconds until both have one.
- **Turns at once** (`caller_turns`, `tenant_turns`): counted by the store in the transaction
  that accepts a turn (every process together); one past them is `TOO_MANY_TURNS` (HTTP 429),
  and nothing is written. A retried messageId still gets its task.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import attrs

from looping_core.a2a import DailyBudgetSpent, RateLimited, TooManyTurns
from looping_core.config import Config, LimitsConfig
from looping_core.contract import Identity
from looping_core.store import internal as store

__all__ = ["MAX_BUCKETS", "TURNS_RETRY_AFTER_SECONDS", "Limits", "TokenBuckets", "too_many_turns"]

MAX_BUCKETS = 100_000
"""Buckets kept per process; past that the least recently used is forgotten (a full bucket is
the same as none, so only a caller idle through 100,000 others' requests gains anything)."""
TURNS_RETRY_AFTER_SECONDS = 1
"""What `Retry-After` says to a caller at its turn limit: a turn's end cannot be foreseen."""


class TokenBuckets:
    """Token buckets by key: each fills at its own rate up to its capacity."""

    def __init__(
        self, *, max_buckets: int = MAX_BUCKETS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._buckets: dict[object, tuple[float, float]] = {}
        """key -> (tokens, when they were counted); oldest use first."""
        self._max_buckets = max_buckets
        self._clock = clock

    def take(self, wanted: list[tuple[object, float, float]]) -> float:
        """Take one token from every `(key, rate, capacity)` bucket, or from none: 0 when
        taken, else the seconds until every one of them holds a token."""
        now = self._clock()
        counted = []
        wait = 0.0
        for key, rate, capacity in wanted:
            tokens, then = self._buckets.pop(key, (capacity, now))
            tokens = min(capacity, tokens + (now - then) * rate)
            counted.append((key, tokens))
            if tokens < 1:
                wait = max(wait, (1 - tokens) / rate)
        spend = 1 if wait == 0 else 0
        for key, tokens in counted:
            self._buckets[key] = (tokens - spend, now)  # at the end: the latest used
        while len(self._buckets) > self._max_buckets:
            del self._buckets[next(iter(self._buckets))]
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


@attrs.frozen
class Limits:
    """Every tenant's limits, resolved once from the config."""

    of_tenant: Mapping[str, LimitsConfig]
    turns: Mapping[str, store.TurnLimits]
    """What the store checks as it accepts a turn, per tenant."""
    buckets: TokenBuckets = attrs.field(factory=TokenBuckets)

    @classmethod
    def from_config(cls, config: Config) -> Limits:
        # The job engine's fair order counts a tenant's turns as far as a limit would: its
        # own, or the default one for a tenant without.
        fair = LimitsConfig().tenant_turns if config.uses_job_engine() else 0
        of_tenant = {tenant: config.limits_of(tenant) for tenant in config.tenants}
        turns = {
            tenant: store.TurnLimits(
                caller=own.caller_turns,
                tenant=own.tenant_turns,
                fair=fair,
                caller_daily_cost=own.caller_daily_cost,
            )
            for tenant, own in of_tenant.items()
        }
        return cls(of_tenant, turns)

    def check_rate(self, caller: Identity) -> None:
        """Count one request of `caller`; `RateLimited` past its or its tenant's rate."""
        own = self.of_tenant.get(caller.tenant)
        if own is None:
            return
        wanted: list[tuple[object, float, float]] = []
        for scope, rate in (
            ((caller.tenant, caller.issuer, caller.subject), own.caller_requests_per_second),
            (caller.tenant, own.tenant_requests_per_second),
        ):
            if rate > 0:
                wanted.append((scope, rate, max(1.0, rate * own.burst_seconds)))
        if not wanted:
            return
        wait = self.buckets.take(wanted)
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            raise RateLimited(
                "Too many requests from this caller or its agent's callers; try again in "
                f"{seconds} s",
                metadata={"retryAfterSeconds": str(seconds)},
            )


def budget_spent(refusal: store.BudgetSpent) -> DailyBudgetSpent:
    """The store's refusal as the caller hears it: the budget, and when it is whole again."""
    return DailyBudgetSpent(
        f"This caller's turns have cost its daily budget ({refusal.limit:g}) today; try again "
        "after midnight UTC",
        metadata={
            "limit": f"{refusal.limit:g}",
            "retryAfterSeconds": str(refusal.seconds_left),
        },
    )


def too_many_turns(refusal: store.TooManyTurns) -> TooManyTurns:
    """The store's refusal as the caller hears it: whose limit, and when to try again."""
    whose = "This caller has" if refusal.scope == "caller" else "This agent's callers have"
    return TooManyTurns(
        f"{whose} {refusal.limit} turns waiting or running already, the limit; try again once "
        "one has ended",
        metadata={
            "limit": str(refusal.limit),
            "scope": refusal.scope,
            "retryAfterSeconds": str(TURNS_RETRY_AFTER_SECONDS),
        },
    )
