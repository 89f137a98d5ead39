"""Plugin `example-notes`: notes an agent can keep, stored in the plugin's own table."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping, Sequence
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
    if context.database is None:
        raise RuntimeError("the notes tools need the store's database in the ToolContext")
    note: Any = _note_model(context.database)
    mine = (note.tenant == context.tenant) & (note.instance_id == context.instance_id)

    async def add_note(arguments: Mapping[str, Any]) -> dict[str, Any]:
        text = str(arguments["text"])

        def insert() -> int:
            row = note.create(tenant=context.tenant, instance_id=context.instance_id, text=text)
            return int(row.id)

        return {"id": await asyncio.to_thread(insert)}

    async def list_notes(arguments: Mapping[str, Any]) -> dict[str, Any]:
        def select() -> list[str]:
            query = note.select(note.text).where(mine).order_by(note.id).limit(config.max_notes)
            return [row.text for row in query]

        return {"notes": await asyncio.to_thread(select)}

    return [
        Tool(
            name="add_note",
            description="Keep a note for later.",
            input_schema={
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
            handler=add_note,
        ),
        Tool(
            name="list_notes",
            description="List the notes kept so far, oldest first.",
            input_schema={"type": "object", "properties": {}, "additionalProperties": False},
            handler=list_notes,
        ),
    ]


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
