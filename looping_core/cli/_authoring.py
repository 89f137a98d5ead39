"""Building on looping-core: `looping plugins list`, `new`, `plugin new` and `model serve`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from looping_core.cli._common import (
    clean_errors,
    config_option,
    dir_option,
)
from looping_core.cli._main import main
from looping_core.config import load_config, resolve_config_path
from looping_core.modelserver import DEFAULT_PORT, ModelServer, TestModel, load_model, serve_model
from looping_core.plugin_template import ci_fill_in, core_source, write_plugin
from looping_core.plugins import list_plugins
from looping_core.project_template import write_project

__all__ = ["model", "new", "plugin", "plugins"]


@main.group()
def plugins() -> None:
    """Inspect installed plugins."""


@plugins.command("list")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (its shape: contracts/plugins-list.schema.json).",
)
@config_option
@clean_errors
def list_command(as_json: bool, config_path: Path | None) -> None:
    """List installed plugins: key, distribution, version, contract, hooks, selected."""
    selected = _selected_keys(config_path)
    rows = list_plugins(selected)
    if as_json:
        document: dict[str, Any] = {"plugins": [row.to_json() for row in rows]}
        click.echo(json.dumps(document, indent=2))
        return
    if not rows:
        click.echo("No plugins installed (entry-point group looping.plugins).")
        return
    for row in rows:
        mark = "*" if row.selected else " "
        contract = row.contract_version if row.contract_version is not None else "?"
        click.echo(f"{mark} {row.key}  {row.distribution} {row.version}  contract {contract}")
        if row.capability:
            click.echo(f"    {row.capability}")
        if row.error:
            click.echo(f"    error: {row.error}")
        else:
            click.echo(f"    hooks: {', '.join(row.hooks) or 'none'}")
    click.echo("(* = selected in the config)")


def _selected_keys(config_path: Path | None) -> tuple[str, ...]:
    path = resolve_config_path(config_path)
    if config_path is None and not path.exists():
        return ()
    return load_config(path).plugins.enabled


@main.command("new")
@click.argument("name")
@dir_option
@clean_errors
def new(name: str, into: Path) -> None:
    """Write a new agent project NAME: an agent with a typed tool, its config, tests, CI."""
    target = write_project(name, into)
    click.echo(f"wrote {target}; its README says how to install, test, serve and ask it:")
    click.echo(f"  cd {target}")
    for line in _commands(target / "README.md", "## Install and test"):
        click.echo(f"  {line}")
    _say_ci_fill_in(target)


def _say_ci_fill_in(target: Path) -> None:
    """When the generated CI cannot install looping-core as it is installed here, say so."""
    source = core_source()
    if not source.reachable:
        click.echo(f"note: {target / '.github/workflows/ci.yml'} needs one line filled in:")
        for line in ci_fill_in(source):
            click.echo(f"  {line}")


def _commands(readme: Path, heading: str) -> list[str]:
    """The lines of the first shell block after `heading` in `readme`."""
    lines = readme.read_text().splitlines()
    start = lines.index(heading)
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```sh"))
    closing = lines.index("```", opening + 1)
    return lines[opening + 1 : closing]


@main.group()
def plugin() -> None:
    """Write plugins."""


@plugin.command("new")
@click.argument("name")
@dir_option
@clean_errors
def plugin_new(name: str, into: Path) -> None:
    """Write a new plugin distribution NAME: entry point, hooks, a tool, tests, CI."""
    target = write_plugin(name, into)
    click.echo(f"wrote {target}; its README says how to install and test it")
    _say_ci_fill_in(target)


@main.group()
def model() -> None:
    """A local model endpoint, for agents served with no hosted model."""


@model.command("serve")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The port on 127.0.0.1 (the default is Ollama's, which examples/looping.toml names).",
)
@click.option(
    "--model",
    "reference",
    default=None,
    metavar="MODULE:ATTR",
    help="The model that answers: a FunctionModel or TestModel, a function of a ModelRequest, "
    "or a function that returns a model (default: a TestModel).",
)
@clean_errors
def model_serve(port: int, reference: str | None) -> None:
    """Serve an OpenAI-compatible Chat Completions endpoint on 127.0.0.1 until Ctrl-C.

    With no --model it answers as TestModel does: it calls every tool it is offered once, with
    arguments valid for the tool's schema (the first text parameter gets the user's last text),
    then answers with what they returned, as JSON data (with no tools, a fixed text). Point a
    tenant's [tenants.<id>.model] base_url at it."""
    if reference is not None:
        sys.path.insert(0, str(Path.cwd()))  # a module of this folder (as uvicorn finds apps)
    chosen = load_model(reference) if reference is not None else TestModel()

    def ready(server: ModelServer) -> None:
        click.echo(
            f"model endpoint {server.base_url} answering with {chosen.label} "
            f"({reference or 'the built-in TestModel'}); Ctrl-C stops it"
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_model(chosen, port, ready))
