"""Plugin `example-notes`: notes an agent can keep, stored in the plugin's own table."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from typing import Any

import attrs
import peewee
from playhouse import migrate

from looping_core.contract import (
    PluginInfo,
    PluginStore,
    SubtaskRecipe,
    SubtaskType,
    Tool,
    ToolContext,
    ToolFamily,
)
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl
from looping_core.tools import tool

TABLE = "example_notes"
STORE_VERSION = 2


@attrs.frozen
class NotesConfig:
    """`[plugins.example-notes]`."""

    max_notes: int = 100
    """How many notes `list_notes` returns at most."""


@attrs.frozen
class SummarizeParams:
    """Parameters of the `summarize-notes` subtask."""

    topic: str
    max_notes: int = 20


@functools.cache
def _note_model(db: peewee.Database) -> type[peewee.Model]:
    """The `example_notes` table as a peewee model bound to `db` (portable SQL, any backend)."""

    class Note(peewee.Model):
        tenant = peewee.TextField()
        instance_id = peewee.TextField()
        text = peewee.TextField()
        created_at = peewee.DateTimeField(null=True, default=datetime.datetime.now)

        class Meta:
            database = db
            table_name = TABLE

    return Note


def ensure_tables(db: peewee.Database, from_version: int) -> None:
    """Create or upgrade `example_notes`; safe to run again at every start.

    Version 1 created the table without `created_at`; version 2 added it. The column check (not
    just `from_version`) keeps it idempotent even if a previous run stopped half way.
    """
    note = _note_model(db)
    db.create_tables([note], safe=True)
    if from_version < 2 and "created_at" not in {c.name for c in db.get_columns(TABLE)}:
        migrator = migrate.SchemaMigrator.from_database(db)
        migrate.migrate(migrator.add_column(TABLE, "created_at", note.created_at))


def _tools(context: ToolContext, config: NotesConfig) -> Sequence[Tool]:
    """The caller's notes tools: typed functions whose table work runs on the store's thread
    (`context.store`), with the store's own writes."""
    store = context.store
    if store is None:
        raise RuntimeError("the notes tools need the store (ToolContext.store) of a served turn")

    def mine(note: Any) -> Any:
        return (note.tenant == context.tenant) & (note.instance_id == context.instance_id)

    @tool
    async def add_note(text: str) -> dict[str, int]:
        """Keep a note for later."""

        def insert(db: peewee.Database) -> int:
            note: Any = _note_model(db)
            return int(
                note.create(tenant=context.tenant, instance_id=context.instance_id, text=text).id
            )

        return {"id": await store.run(insert)}

    @tool
    async def list_notes() -> dict[str, list[str]]:
        """List the notes kept so far, oldest first."""

        def select(db: peewee.Database) -> list[str]:
            note: Any = _note_model(db)
            query = note.select(note.text).where(mine(note)).order_by(note.id)
            return [row.text for row in query.limit(config.max_notes)]

        return {"notes": await store.run(select)}

    return [add_note, list_notes]


def _summarize_recipe(params: SummarizeParams) -> SubtaskRecipe:
    return SubtaskRecipe(
        instructions=f"Summarize at most {params.max_notes} notes about {params.topic}.",
        tool_families=("notes",),
        max_rounds=3,
    )


@hookimpl
def contract_version() -> int:
    return CONTRACT_VERSION


@hookimpl
def plugin_info() -> PluginInfo:
    return PluginInfo(
        capability="Lets an agent keep and list notes in its own table.",
        config_type=NotesConfig,
    )


@hookimpl
def tool_families(config: NotesConfig) -> list[ToolFamily]:
    return [
        ToolFamily(
            name="notes",
            description="Keep and list notes.",
            factory=lambda context: _tools(context, config),
        )
    ]


@hookimpl
def subtask_types() -> list[SubtaskType]:
    return [
        SubtaskType(
            key="summarize-notes",
            description="Summarize the notes about a topic.",
            params_type=SummarizeParams,
            recipe=_summarize_recipe,
        )
    ]


@hookimpl
def stores() -> list[PluginStore]:
    return [
        PluginStore(
            plugin="example-notes",
            version=STORE_VERSION,
            ensure_tables=ensure_tables,
            tables=(TABLE,),
        )
    ]
