"""The embedded runner's turn slots, handed out fairly: a freed slot goes to the tenant whose
turn waited longest among those that had none since, and within a tenant to its callers in
the same way (round robin at both levels). One tenant's backlog then waits behind another's
next turn instead of ahead of all of it, and one caller's behind its neighbours'."""

from __future__ import annotations

import asyncio
from collections import deque

from looping_core.contract import Identity

__all__ = ["FairSlots"]


class FairSlots:
    """`size` slots; a turn takes one (waiting for it, fairly) and gives it back when done."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: dict[str, dict[Identity | None, deque[asyncio.Future[None]]]] = {}
        """tenant -> caller -> its turns' waits, in order; tenants and callers in the order
        they are served next (the one served goes to the back)."""

    def locked(self) -> bool:
        """Whether a turn asking now would wait: no slot is free, or turns wait already."""
        return self._free == 0 or bool(self._waiting)

    def try_take(self) -> bool:
        """Take a free slot if no turn waits for one (never waits)."""
        if self.locked():
            return False
        self._free -= 1
        return True

    async def take(self, owner: Identity | None) -> None:
        """Wait for a slot in `owner`'s place in the round (`None`: a turn whose caller is not
        known here, such as one taken up after a restart, served as a tenant of its own)."""
        if self.try_take():
            return
        future = asyncio.get_running_loop().create_future()
        tenant = owner.tenant if owner is not None else ""
        queue = self._waiting.setdefault(tenant, {}).setdefault(owner, deque())
        queue.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a slot as it was canceled: the next turn's
            else:
                self._forget(tenant, owner, future)
            raise

    def release(self) -> None:
        """Give a slot back: to the next turn in the round, or to the free ones."""
        while self._waiting:
            tenant, callers = next(iter(self._waiting.items()))
            caller, queue = next(iter(callers.items()))
            future = queue.popleft()
            del callers[caller]
            if queue:
                callers[caller] = queue  # its next turn: after the tenant's other callers
            del self._waiting[tenant]
            if callers:
                self._waiting[tenant] = callers  # after the other tenants
            if not future.done():
                future.set_result(None)
                return
        self._free += 1

    def _forget(self, tenant: str, owner: Identity | None, future: asyncio.Future[None]) -> None:
        """Drop a canceled wait, and the places in the round it alone held."""
        callers = self._waiting.get(tenant, {})
        queue = callers.get(owner)
        if queue is None or future not in queue:
            return
        queue.remove(future)
        if not queue:
            del callers[owner]
        if not callers:
            self._waiting.pop(tenant, None)
