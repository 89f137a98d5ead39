"""The example plugins, validated the way the host validates them, and exercised for real."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import peewee
import pytest

from looping_core.config import Config, PluginsConfig
from looping_core.contract import Identity, SessionRef, ToolCall, ToolContext, Turn
from looping_core.plugins import PluginHost
from looping_core.testing import (
    PluginValidator,
    assert_plugin_valid,
    plugin_problems,
    plugin_store,
)
from looping_plugins_example import notes

SESSION = SessionRef(
    Identity(tenant="t1", issuer="https://gw.example", subject="me"), context_id="c1"
)


def test_both_plugins_pass_the_hosts_validation(plugin_validator: PluginValidator) -> None:
    assert plugin_validator.problems("example-notes") == []
    assert plugin_validator.problems("example-gates") == []
    registry = assert_plugin_valid("example-notes", together_with=["example-gates"])
    assert registry.keys == ("example-notes", "example-gates")


def test_notes_contributes_a_family_a_subtask_type_and_a_store() -> None:
    registry = assert_plugin_valid("example-notes")
    assert set(registry.tool_families) == {"notes"}
    assert set(registry.subtask_types) == {"summarize-notes"}
    store = registry.stores["example-notes"].item
    assert (store.version, store.tables) == (2, ("example_notes",))
    for contribution in (registry.tool_families["notes"], registry.stores["example-notes"]):
        assert contribution.source.distribution == "looping-plugins-example"


def test_notes_settings_are_checked() -> None:
    [problem] = plugin_problems("example-notes", {"max_notes": "many"})
    assert problem.message.endswith(
        "expected an integer, got string @ $.plugins.example-notes.max_notes"
    )


def columns(db: peewee.Database) -> list[str]:
    return [column.name for column in db.get_columns(notes.TABLE)]


@pytest.fixture
def db(tmp_path: Path) -> peewee.SqliteDatabase:
    database = peewee.SqliteDatabase(str(tmp_path / "notes.db"))
    database.connect()
    return database


def test_ensure_tables_creates_the_current_version_and_is_idempotent(
    db: peewee.SqliteDatabase,
) -> None:
    notes.ensure_tables(db, 0)
    notes.ensure_tables(db, 2)
    notes.ensure_tables(db, 0)
    assert columns(db) == ["id", "tenant", "instance_id", "text", "created_at"]


def test_ensure_tables_upgrades_a_version_1_table_without_losing_rows(
    db: peewee.SqliteDatabase,
) -> None:
    db.execute_sql(
        "CREATE TABLE example_notes (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL,"
        " instance_id TEXT NOT NULL, text TEXT NOT NULL)"
    )
    db.execute_sql("INSERT INTO example_notes (tenant, instance_id, text) VALUES ('t', 'i', 'old')")
    notes.ensure_tables(db, 1)
    notes.ensure_tables(db, 1)  # a crash before the version was recorded: run again
    assert columns(db)[-1] == "created_at"
    assert db.execute_sql("SELECT text FROM example_notes").fetchall() == [("old",)]


async def test_notes_tools_are_scoped_to_their_agent_instance(tmp_path: Path) -> None:
    family = assert_plugin_valid("example-notes", {"max_notes": 2}).tool_families["notes"].item
    with plugin_store(f"sqlite:///{tmp_path / 'notes.db'}", notes.stores()) as store:
        mine = {t.name: t for t in family.factory(ToolContext("t1", "a", store=store))}
        theirs = {t.name: t for t in family.factory(ToolContext("t2", "a", store=store))}
        call = ToolCall("c1", "add_note")
        for text in ("one", "two", "three"):
            await mine["add_note"].handler({"text": text}, call)
        await theirs["add_note"].handler({"text": "not yours"}, call)
        assert await mine["list_notes"].handler({}, call) == {"notes": ["one", "two"]}
        assert await theirs["list_notes"].handler({}, call) == {"notes": ["not yours"]}


def test_notes_tools_need_the_store_of_a_served_turn() -> None:
    family = assert_plugin_valid("example-notes").tool_families["notes"].item
    with pytest.raises(RuntimeError, match=r"need the store \(ToolContext.store\)"):
        family.factory(ToolContext("t1", "a"))


def test_the_summarize_recipe_uses_the_notes_family() -> None:
    subtask = assert_plugin_valid("example-notes").subtask_types["summarize-notes"].item
    recipe = subtask.recipe(subtask.params_type(topic="travel"))
    assert recipe.tool_families == ("notes",)
    assert "travel" in recipe.instructions
    assert attrs.has(subtask.params_type)


def gates_host(**settings: str) -> PluginHost:
    config = Config(
        plugins=PluginsConfig(enabled=("example-gates",), settings={"example-gates": settings})
    )
    return PluginHost.load(config, environ={})


async def test_the_gate_mutes_turns_with_the_prefix() -> None:
    host = gates_host()
    assert await host.should_handle_turn([], Turn(SESSION, "t", "  /mute for now")) is False
    assert await host.should_handle_turn([], Turn(SESSION, "t", "hello")) is True


async def test_the_listener_logs_displaced_messages(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="looping_plugins_example.gates"):
        await gates_host().messages_displaced(["a", "b", "c"], SESSION)
    assert caplog.messages == ["3 message(s) displaced from context c1 of tenant t1"]
