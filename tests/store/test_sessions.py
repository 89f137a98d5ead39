"""Durable sessions on both stores: order, scoping, concurrent appends, compaction, migration."""

from __future__ import annotations

import asyncio

import pytest

from looping_core.content import (
    AssistantMessage,
    TextBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from looping_core.contract import Identity, SessionRef
from looping_core.store.internal import Database, SessionStore, migration_status

ALICE = Identity("t", "https://gw.example", "alice")
SESSION = SessionRef(ALICE, "ctx-1")


@pytest.fixture
def sessions(database: Database) -> SessionStore:
    return SessionStore(database)


def said(text: str) -> UserMessage:
    return UserMessage([TextBlock(text)])


async def test_messages_come_back_in_order_exactly_as_stored(sessions: SessionStore) -> None:
    turn = [
        said("add milk"),
        AssistantMessage(
            [TextBlock("Adding."), ToolUseBlock("call-1", "notes.add", {"text": "milk"})],
            usage=Usage(input_tokens=10, output_tokens=4),
        ),
        ToolResultMessage([ToolResultBlock("call-1", (TextBlock("added"),))]),
    ]
    assert await sessions.append(SESSION, turn[:1], task_id="task-1") == 1
    assert await sessions.append(SESSION, turn[1:], task_id="task-1") == 3
    assert await sessions.history(SESSION) == turn


async def test_an_append_of_many_messages_keeps_their_order_and_counts_them(
    sessions: SessionStore,
) -> None:
    """More messages than one INSERT carries, after a compaction left positions with a gap:
    the length is the messages there, and the new ones follow the last."""
    assert await sessions.append(SESSION, [said(f"m{n}") for n in range(3)]) == 3
    removed = await sessions.displace(SESSION, 2, [said("summary")])  # 3 -> 2 messages
    assert removed == [said("m0"), said("m1")]
    many = [said(f"n{n}") for n in range(250)]
    assert await sessions.append(SESSION, many, task_id="t", turn="u") == 252
    assert await sessions.append(SESSION, []) == 252
    assert await sessions.history(SESSION) == [said("summary"), said("m2"), *many]


async def test_a_session_is_the_callers_and_the_contexts_own(sessions: SessionStore) -> None:
    await sessions.append(SESSION, [said("mine")])
    others = [
        SessionRef(Identity("t", "https://gw.example", "bob"), "ctx-1"),
        SessionRef(Identity("t", "https://other-gw.example", "alice"), "ctx-1"),
        SessionRef(Identity("u", "https://gw.example", "alice"), "ctx-1"),
        SessionRef(ALICE, "ctx-2"),
    ]
    for other in others:
        assert await sessions.history(other) == []
        assert await sessions.displace(other, 5) == []
    await sessions.append(others[0], [said("bob's")])
    assert await sessions.history(SESSION) == [said("mine")]
    assert await sessions.history(others[0]) == [said("bob's")]


async def test_concurrent_appends_each_get_their_own_place(
    database: Database, store_url: str
) -> None:
    """Two stores on one database (two workers): 40 appends at once, none lost or doubled."""
    other = Database.from_url(store_url)
    try:
        stores = [SessionStore(database), SessionStore(other)]
        await asyncio.gather(*(stores[i % 2].append(SESSION, [said(f"m{i}")]) for i in range(40)))
        texts = [m.content[0].text for m in await stores[0].history(SESSION)]  # type: ignore[union-attr]
    finally:
        other.close()
    assert sorted(texts, key=lambda t: int(t[1:])) == [f"m{i}" for i in range(40)]


async def test_compaction_removes_the_oldest_and_puts_a_summary_in_their_place(
    sessions: SessionStore,
) -> None:
    messages = [said(f"m{i}") for i in range(6)]
    await sessions.append(SESSION, messages)
    summary = said("summary of m0..m3")
    displaced = await sessions.displace(SESSION, 4, [summary])
    assert displaced == messages[:4]
    assert await sessions.history(SESSION) == [summary, *messages[4:]]
    assert await sessions.append(SESSION, [said("m6")]) == 4
    assert (await sessions.history(SESSION))[-1] == said("m6")
    with pytest.raises(ValueError, match="cannot be longer"):
        await sessions.displace(SESSION, 1, [summary, summary])


async def test_the_sessions_migration_is_recorded(database: Database) -> None:
    status = await database.run_alone(migration_status, database.peewee)
    assert status.applied == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)
    assert status.pending == ()
