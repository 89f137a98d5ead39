"""The embedded runner's slots go to waiting turns round robin: by tenant, then by caller within
a tenant, so one tenant's (or one caller's) backlog never waits ahead of another's next turn."""

from __future__ import annotations

import asyncio

from looping_core.contract import Identity
from looping_core.runner.internal import FairSlots


def caller(tenant: str, subject: str = "alice") -> Identity:
    return Identity(tenant=tenant, issuer="https://gateway.test", subject=subject)


async def served_order(slots: FairSlots, owners: list[Identity | None]) -> list[int]:
    """Queue one waiting turn per owner (in that order), then free one slot at a time: the
    order the turns got a slot in."""
    order: list[int] = []

    async def turn(index: int, owner: Identity | None) -> None:
        await slots.take(owner)
        order.append(index)

    waits = [asyncio.create_task(turn(index, owner)) for index, owner in enumerate(owners)]
    await asyncio.sleep(0)
    assert order == []
    for _ in owners:
        slots.release()
        await asyncio.sleep(0)
    await asyncio.gather(*waits)
    return order


async def test_a_flooding_tenant_waits_behind_the_next_turn_of_another() -> None:
    slots = FairSlots(1)
    assert slots.try_take()
    flood = [caller("a")] * 5
    order = await served_order(slots, [*flood, caller("b"), caller("c")])
    # b and c came after a's five, yet each waits behind one of a's turns only.
    assert order == [0, 5, 6, 1, 2, 3, 4]


async def test_callers_of_one_tenant_take_turns() -> None:
    slots = FairSlots(1)
    assert slots.try_take()
    owners = [caller("a", "x"), caller("a", "x"), caller("a", "x"), caller("a", "y")]
    assert await served_order(slots, owners) == [0, 3, 1, 2]


async def test_tenants_alternate_and_callers_alternate_within_them() -> None:
    slots = FairSlots(1)
    assert slots.try_take()
    owners = [caller("a", "x"), caller("a", "x"), caller("a", "y"), caller("b"), caller("b")]
    # a's x, b, a's y, b, a's x.
    assert await served_order(slots, owners) == [0, 3, 2, 4, 1]


async def test_a_turn_with_no_known_caller_is_served_as_a_tenant_of_its_own() -> None:
    slots = FairSlots(1)
    assert slots.try_take()
    assert await served_order(slots, [caller("a"), caller("a"), None]) == [0, 2, 1]


async def test_free_slots_are_taken_at_once_and_none_while_turns_wait() -> None:
    slots = FairSlots(2)
    assert slots.try_take()
    await slots.take(caller("a"))  # the second one, without waiting
    assert slots.locked()
    assert not slots.try_take()
    waiting = asyncio.create_task(slots.take(caller("b")))
    await asyncio.sleep(0)
    slots.release()
    await waiting
    slots.release()
    slots.release()
    assert slots.try_take()
    assert slots.try_take()
    assert not slots.try_take()


async def test_a_canceled_wait_leaves_its_place_and_no_slot_is_lost() -> None:
    slots = FairSlots(1)
    assert slots.try_take()
    gone = asyncio.create_task(slots.take(caller("a")))
    stays = asyncio.create_task(slots.take(caller("b")))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    slots.release()
    await stays  # the slot went past the canceled wait
    slots.release()
    assert not slots.locked()  # nothing left waiting, the one slot free again
    assert slots.try_take()


async def test_a_wait_canceled_as_it_was_handed_a_slot_passes_the_slot_on() -> None:
    slots = FairSlots(1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take(caller("a")))
    second = asyncio.create_task(slots.take(caller("b")))
    await asyncio.sleep(0)
    slots.release()  # handed to the first wait...
    first.cancel()  # ...which is canceled before it runs again
    await asyncio.sleep(0)
    await second  # the second has the slot instead
    assert first.cancelled()
    slots.release()
    assert slots.try_take()
    assert not slots.try_take()
