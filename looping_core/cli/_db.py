"""`looping db`: the store's migrations, a gone node's turns, and retention."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import click

from looping_core.a2a import load_signing_key
from looping_core.cli._common import (
    clean_errors,
    config_option,
    no_database_yet,
    on_store,
    shown_url,
)
from looping_core.cli._main import main
from looping_core.config import Config, load_config, resolve_config_path
from looping_core.errors import LoopingError
from looping_core.runner.internal import run_retention
from looping_core.server import internal as server
from looping_core.store.internal import (
    Database,
    StoreError,
    adopt_node,
    connection_problem,
    migration_status,
    nothing_applied,
    plugin_versions,
    seal_again,
    upgrade,
)

__all__ = ["db"]


@main.group()
def db() -> None:
    """See and apply the store's migrations."""


@db.command("status")
@config_option
@clean_errors
def db_status(config_path: Path | None) -> None:
    """Show applied and pending core migrations, and plugin store versions."""
    config = load_config(resolve_config_path(config_path))
    if no_database_yet(config):
        click.echo(f"store: {shown_url(config.store.url)}")
        click.echo("  no database yet: `looping serve` or `looping db upgrade` creates it")
        for migration in nothing_applied().pending:
            click.echo(f"  pending  {migration.version:04d}  {migration.name}")
        return
    status, plugins = on_store(config, lambda db: (migration_status(db), plugin_versions(db)))
    click.echo(f"store: {shown_url(config.store.url)}")
    for version in status.applied:
        click.echo(f"  applied  {version:04d}")
    for migration in status.pending:
        click.echo(f"  pending  {migration.version:04d}  {migration.name}")
    for plugin, version in sorted(plugins.items()):
        click.echo(f"  plugin   {plugin} at version {version}")
    engine = _engine_schema(config)
    if engine is not None:
        if engine.current:
            click.echo(f"  jobs     {engine.applied} (procrastinate)")
        else:
            for name in engine.pending:
                click.echo(f"  pending  jobs {name} (procrastinate)")
            for name in engine.missing:
                click.echo(f"  pending  jobs {name} (looping-core)")
    if not status.pending and (engine is None or engine.current):
        click.echo("up to date")


@db.command("upgrade")
@config_option
@clean_errors
def db_upgrade(config_path: Path | None) -> None:
    """Apply pending core migrations, and the job engine's (the server also does it when it
    starts; `looping worker` never does)."""
    config = load_config(resolve_config_path(config_path))
    applied = on_store(config, upgrade)
    for migration in applied:
        click.echo(f"applied {migration.version:04d}  {migration.name}")
    if config.uses_job_engine():
        from looping_core.runner.internal import (  # noqa: PLC0415 - postgres extra
            ENGINE_ADDITIONS,
            apply_engine_schema,
        )

        for name in on_store(config, lambda db: apply_engine_schema(db.connection())):  # type: ignore[no-untyped-call]
            owner = "looping-core" if name in ENGINE_ADDITIONS else "procrastinate"
            click.echo(f"applied jobs {name} ({owner})")
    click.echo("up to date")


def _engine_schema(config: Config) -> Any:
    """The job engine's schema state, when the config uses the engine (`None` otherwise)."""
    if not config.uses_job_engine():
        return None
    from looping_core.runner.internal import engine_schema  # noqa: PLC0415 - postgres extra

    return on_store(config, lambda db: engine_schema(db.connection()))  # type: ignore[no-untyped-call]


def _require_migrated(config: Config) -> None:
    if on_store(config, migration_status).pending:
        raise LoopingError("the store has pending migrations; run `looping db upgrade` first")


@db.command("adopt")
@click.argument("gone")
@config_option
@clean_errors
def db_adopt(gone: str, config_path: Path | None) -> None:
    """Take over the unfinished turns and pending pushes of node GONE, a machine that will not
    come back, for this config's node."""
    config = load_config(resolve_config_path(config_path))
    if config.uses_job_engine():
        raise LoopingError(
            "with the job engine ([runner] engine, on PostgreSQL) turns and pushes belong to no "
            "node: a dead machine's jobs are taken up by the other workers by themselves"
        )
    node = server.node_of(config)
    if gone == node:
        raise LoopingError(
            f"node {gone!r} is this server's own node; its turns are recovered when it starts"
        )
    _require_migrated(config)
    database = Database.from_url(config.store.location())
    try:
        tasks, pushes = database.run_sync(adopt_node, database, gone, node, config.server.workers)
    finally:
        database.close()
    click.echo(
        f"node {node!r} took {tasks} unfinished task(s) and {pushes} pending push(es)"
        f" from node {gone!r}"
    )
    if tasks:
        click.echo("restart this node's server to resume or fail those turns (on_restart)")


@db.command("rotate-secrets")
@config_option
@clean_errors
def db_rotate_secrets(config_path: Path | None) -> None:
    """Seal push configs' secrets again with the current key ([store] secrets_key, or the
    signing key's): those sealed with a key in [store] previous_secrets_keys, and any an older
    release kept in clear. Values stay readable throughout; `looping serve` does the same when
    it starts."""
    config = load_config(resolve_config_path(config_path))
    if no_database_yet(config):
        click.echo("no database yet: nothing to seal")
        return
    _require_migrated(config)
    environ = dict(os.environ)
    secrets = server.push_secrets(
        config, load_signing_key(config.security.signing_key, environ), environ
    )
    database = Database.from_url(config.store.location())
    try:
        sealed = database.run_sync(seal_again, database, secrets)
    finally:
        database.close()
    click.echo(f"sealed the secrets of {sealed} push config(s) with key {secrets.current_id}")


@db.command("prune")
@config_option
@clean_errors
def db_prune(config_path: Path | None) -> None:
    """Delete finished work now, as [retention] says (the server does it every
    interval_seconds): ended tasks with all that hangs off them, old events, pushes done with."""
    config = load_config(resolve_config_path(config_path))
    if no_database_yet(config):
        click.echo("no database yet: nothing to prune")
        return
    _require_migrated(config)
    database = Database.from_url(config.store.location())

    async def pass_once() -> Any:
        return await run_retention(database, config.retention)

    try:
        counts = asyncio.run(pass_once())
    except StoreError as exc:
        raise StoreError(connection_problem(exc) or str(exc)) from None
    finally:
        database.close()
    click.echo(
        f"deleted {counts.tasks} ended task(s), {counts.sessions} session(s), {counts.events}"
        f" event(s) and {counts.pushes} push(es)"
    )
