"""What the commands share: the common options, printing a `LoopingError` as its message (never a
traceback), and opening the configured store."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import ParamSpec, TypeVar

import click
import peewee

from looping_core.config import LOG_LEVELS, Config
from looping_core.errors import LoopingError
from looping_core.store.internal import (
    Database,
    raise_one_line,
)

__all__ = [
    "clean_errors",
    "config_option",
    "dir_option",
    "log_level_option",
    "no_database_yet",
    "on_store",
    "shown_url",
    "tenants_of",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The config file (default: $LOOPING_CONFIG, else ./looping.toml).",
)


dir_option = click.option(
    "--dir",
    "into",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(),
    help="Where to write it (default: here).",
)


log_level_option = click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS),
    default=None,
    help="debug, info, warning or error (default: [observability] log_level).",
)


def clean_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Print a `LoopingError` as its message and exit 1, instead of a traceback."""

    @wraps(command)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except LoopingError as exc:
            click.echo(str(exc), err=True)
            sys.exit(1)

    return wrapper


def on_store(config: Config, work: Callable[[peewee.Database], _R]) -> _R:
    """Run `work` on the configured store's own thread, then close the store; a store that
    cannot be reached is one line (`StoreError`), not the driver's traceback."""
    database = Database.from_url(config.store.location())
    try:
        return database.run_sync(work, database.peewee)
    except Exception as exc:
        raise_one_line(exc)
    finally:
        database.close()


def no_database_yet(config: Config) -> bool:
    """An SQLite store whose file does not exist (opening it would create it)."""
    url = config.store.location()
    path = url.removeprefix("sqlite:///")
    return url.startswith("sqlite:///") and path != ":memory:" and not Path(path).exists()


def shown_url(url: str) -> str:
    """The store URL without a password (never printed)."""
    scheme, separator, rest = url.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{separator}{user}:***@{location}"


def tenants_of(config: Config) -> str:
    return ", ".join(sorted(config.tenants)) or "none"
