"""The `looping` command line.

Every expected failure is a `LoopingError` and is printed as its message, never as a traceback.
Exit codes: 0 success, 1 validation found problems, 2 usage error (click's own).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TextIO, TypeVar

import attrs
import click
import peewee

from looping_core._logs import configure as configure_logs
from looping_core.a2a import generate_signing_key
from looping_core.agent import Agent
from looping_core.config import LOG_LEVELS, MAX_WORKERS, Config, load_config, resolve_config_path
from looping_core.errors import ConfigError, LoopingError, ProblemsError, problem_list
from looping_core.gateway import (
    JWKS_ROUTE,
    Target,
    call_agent,
    default_state_folder,
    gateway_key,
    mint_token,
    run_gateway,
    send_text,
)
from looping_core.modelserver import DEFAULT_PORT, ModelServer, TestModel, load_model, serve_model
from looping_core.plugin_template import write_plugin
from looping_core.plugins import PluginHost, list_plugins
from looping_core.project_template import write_project
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
    raise_one_line,
    upgrade,
)

__all__ = ["main"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The config file (default: $LOOPING_CONFIG, else ./looping.toml).",
)


_dir_option = click.option(
    "--dir",
    "into",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(),
    help="Where to write it (default: here).",
)


_log_level_option = click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS),
    default=None,
    help="debug, info, warning or error (default: [observability] log_level).",
)


def _clean_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Print a `LoopingError` as its message and exit 1, instead of a traceback."""

    @wraps(command)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except LoopingError as exc:
            click.echo(str(exc), err=True)
            sys.exit(1)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="looping-core")
def main() -> None:
    """looping: the zero-trust A2A agent foundation."""


@main.command()
@_config_option
@click.option("--connect", is_flag=True, help="Also open the store and show its migrations.")
@_clean_errors
def check(config_path: Path | None, connect: bool) -> None:
    """Run every check `serve` runs before it listens, all but binding the port: the config,
    the signing key, the store URL and its driver, the plugins and the agents, the packages
    metrics and traces need. Exit 1 listing
    every problem. With --connect, also open the store and show its migration state."""
    try:
        config = load_config(resolve_config_path(config_path))
        problems: list[str] = []
    except ConfigError as exc:
        if exc.partial is None:  # not even TOML: nothing else can be looked at
            raise
        # Go on with what could be read, so one run lists the other problems too.
        config, problems = exc.partial, list(exc.problems)
    complete = not problems
    # Every step `serve` takes before it listens, by the same code; a config with problems may
    # have lost a tenant or a model on the way, so its agents are not made then.
    startup, failures = server.check_startup(config, make_agents=complete)
    problems.extend(line for _, lines in failures for line in lines)
    store_url_ok = not any(isinstance(error, StoreError) for error, _ in failures)
    plugins = "none"
    if startup is not None:
        plugins = ", ".join(str(p.source) for p in startup.plugins.registry.plugins) or "none"
        asyncio.run(startup.aclose())  # made as `serve` makes them; their connections closed
    status = None
    if connect and store_url_ok and complete:
        try:
            status = (
                nothing_applied()
                if _no_database_yet(config)  # looking must not create it
                else _on_store(config, migration_status)
            )
        except StoreError as exc:
            problems.append(str(exc))
    if problems:
        raise LoopingError(f"{config.source}: {problem_list('startup', problems)}")
    click.echo(f"{config.source}: OK. Plugins: {plugins}. Tenants: {_tenants(config)}.")
    if status is not None:
        pending = ", ".join(f"{m.version:04d}" for m in status.pending)
        state = (
            f"pending {pending} (the server applies them when it starts)"
            if pending
            else "up to date"
        )
        click.echo(f"store: {_shown_url(config.store.url)}: migrations {state}")


@main.command()
@click.option("--kid", default=None, help="The key id (default: a2a-YYYY-MM-DD, today).")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help='Print only the JWK: export A2A_SIGNING_KEY="$(looping keys -q)".',
)
def keys(kid: str | None, quiet: bool) -> None:
    """Generate the agent's Ed25519 signing key (a private JWK) for A2A_SIGNING_KEY."""
    jwk = json.dumps(generate_signing_key(kid), separators=(",", ":"))
    if quiet:
        click.echo(jwk)
        return
    click.echo("# The agent's private signing key. Keep it secret; never commit it.")
    click.echo("# Its public half is derived and served at /.well-known/jwks.json.")
    click.echo(jwk)
    click.echo("# As a .env line:")
    click.echo(f"A2A_SIGNING_KEY='{jwk}'")


@main.command()
@_config_option
@click.option(
    "--workers",
    type=click.IntRange(1, MAX_WORKERS),
    default=None,
    help="Server processes sharing the socket and the store (default: [server] workers).",
)
@click.option("--host", default=None, help="Listen here instead of [server] host.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Listen here instead of [server] port.",
)
@_log_level_option
@_clean_errors
def serve(
    config_path: Path | None,
    workers: int | None,
    host: str | None,
    port: int | None,
    log_level: str | None,
) -> None:
    """Validate everything, then serve the A2A edge on [server] host and port."""
    config = load_config(resolve_config_path(config_path))
    if host is not None or port is not None:
        # As if the file said so: cards, endpoints and token audiences follow (unless
        # [server] public_url names the address gateways use).
        listen = attrs.evolve(
            config.server,
            host=config.server.host if host is None else host,
            port=config.server.port if port is None else port,
        )
        config = attrs.evolve(config, server=listen)
    plugins = PluginHost.load(config)
    observability = config.observability
    configure_logs(log_level or observability.log_level, observability.log_format)
    server.serve(config, plugins, workers=workers)


@main.command()
@_config_option
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1000),
    default=None,
    help="Turns run at once (default: [runner] concurrency).",
)
@click.option(
    "--queues",
    default=None,
    help="Comma-separated job queues to take (default: all: looping-turns, looping-pushes, "
    "looping-sweeps).",
)
@_log_level_option
@_clean_errors
def worker(
    config_path: Path | None, concurrency: int | None, queues: str | None, log_level: str | None
) -> None:
    """Run the job engine's jobs (turns and pushes) on a PostgreSQL store, serving nothing."""
    config = load_config(resolve_config_path(config_path))
    plugins = PluginHost.load(config)
    observability = config.observability
    configure_logs(log_level or observability.log_level, observability.log_format)
    chosen = [queue.strip() for queue in queues.split(",") if queue.strip()] if queues else None
    server.run_worker(config, plugins, concurrency=concurrency, queues=chosen)


@main.group()
def db() -> None:
    """See and apply the store's migrations."""


@db.command("status")
@_config_option
@_clean_errors
def db_status(config_path: Path | None) -> None:
    """Show applied and pending core migrations, and plugin store versions."""
    config = load_config(resolve_config_path(config_path))
    if _no_database_yet(config):
        click.echo(f"store: {_shown_url(config.store.url)}")
        click.echo("  no database yet: `looping serve` or `looping db upgrade` creates it")
        for migration in nothing_applied().pending:
            click.echo(f"  pending  {migration.version:04d}  {migration.name}")
        return
    status, plugins = _on_store(config, lambda db: (migration_status(db), plugin_versions(db)))
    click.echo(f"store: {_shown_url(config.store.url)}")
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
    if not status.pending and (engine is None or engine.current):
        click.echo("up to date")


@db.command("upgrade")
@_config_option
@_clean_errors
def db_upgrade(config_path: Path | None) -> None:
    """Apply pending core migrations, and the job engine's (the server also does it when it
    starts; `looping worker` never does)."""
    config = load_config(resolve_config_path(config_path))
    applied = _on_store(config, upgrade)
    for migration in applied:
        click.echo(f"applied {migration.version:04d}  {migration.name}")
    if config.uses_job_engine():
        from looping_core.runner.internal import apply_engine_schema  # noqa: PLC0415 - postgres extra

        for name in _on_store(config, lambda db: apply_engine_schema(db.connection())):  # type: ignore[no-untyped-call]
            click.echo(f"applied jobs {name} (procrastinate)")
    click.echo("up to date")


def _engine_schema(config: Config) -> Any:
    """The job engine's schema state, when the config uses the engine (`None` otherwise)."""
    if not config.uses_job_engine():
        return None
    from looping_core.runner.internal import engine_schema  # noqa: PLC0415 - postgres extra

    return _on_store(config, lambda db: engine_schema(db.connection()))  # type: ignore[no-untyped-call]


@db.command("adopt")
@click.argument("gone")
@_config_option
@_clean_errors
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
    if _on_store(config, migration_status).pending:
        raise LoopingError("the store has pending migrations; run `looping db upgrade` first")
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


@db.command("prune")
@_config_option
@_clean_errors
def db_prune(config_path: Path | None) -> None:
    """Delete finished work now, as [retention] says (the server does it every
    interval_seconds): ended tasks with all that hangs off them, old events, pushes done with."""
    config = load_config(resolve_config_path(config_path))
    if _no_database_yet(config):
        click.echo("no database yet: nothing to prune")
        return
    if _on_store(config, migration_status).pending:
        raise LoopingError("the store has pending migrations; run `looping db upgrade` first")
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


def _on_store(config: Config, work: Callable[[peewee.Database], _R]) -> _R:
    """Run `work` on the configured store's own thread, then close the store; a store that
    cannot be reached is one line (`StoreError`), not the driver's traceback."""
    database = Database.from_url(config.store.location())
    try:
        return database.run_sync(work, database.peewee)
    except Exception as exc:
        raise_one_line(exc)
    finally:
        database.close()


def _no_database_yet(config: Config) -> bool:
    """An SQLite store whose file does not exist (opening it would create it)."""
    url = config.store.location()
    path = url.removeprefix("sqlite:///")
    return url.startswith("sqlite:///") and path != ":memory:" and not Path(path).exists()


def _problems_of(error: LoopingError) -> list[str]:
    """Each problem an error lists (plugin, model problems), or the error as one."""
    return error.problem_lines() if isinstance(error, ProblemsError) else [str(error)]


def _shown_url(url: str) -> str:
    """The store URL without a password (never printed)."""
    scheme, separator, rest = url.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{separator}{user}:***@{location}"


async def _close_agents(agents: list[Agent]) -> None:
    for agent in agents:
        await agent.aclose()


def _tenants(config: Config) -> str:
    return ", ".join(sorted(config.tenants)) or "none"


@main.group()
def plugins() -> None:
    """Inspect installed plugins."""


@plugins.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (contracts/plugins-list).")
@_config_option
@_clean_errors
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


if __name__ == "__main__":
    main()


_state_option = click.option(
    "--state",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The local gateway's state folder, which keeps its key (default: "
    "$LOOPING_GATEWAY_STATE, else ~/.local/state/looping/gateway).",
)
_binding_option = click.option(
    "--binding",
    type=click.Choice(["jsonrpc", "rest"]),
    default="jsonrpc",
    show_default=True,
    help="The A2A binding: JSON-RPC, or HTTP+JSON (a token for each is for its own URL).",
)
_SUCCEEDED = {"TASK_STATE_COMPLETED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}


@main.command()
@_config_option
@_state_option
@_clean_errors
def gateway(config_path: Path | None, state: Path | None) -> None:
    """Run a local gateway on the loopback origin the config trusts, until Ctrl-C."""
    config = load_config(resolve_config_path(config_path))
    target = Target.of(config)
    click.echo(f"local gateway on {target.origin} for {target.endpoint}; Ctrl-C stops it")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_gateway(config, state or default_state_folder()))


@main.command()
@click.argument("text", required=False)
@_config_option
@_state_option
@click.option("--tenant", required=True, help="The agent to ask (a [tenants.<id>] of the config).")
@click.option("--file", "source", type=click.File("r"), help="Send this file's text ('-': stdin).")
@click.option("--task", "task_id", default=None, help="Continue this task (it asked for input).")
@click.option("--context", "context_id", default=None, help="Continue this conversation.")
@click.option("--subject", default="caller", help="Who the caller is (the token's sub).")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait.")
@_binding_option
@_clean_errors
def send(
    text: str | None,
    *,
    config_path: Path | None,
    state: Path | None,
    tenant: str,
    source: TextIO | None,
    task_id: str | None,
    context_id: str | None,
    subject: str,
    as_json: bool,
    timeout: float,
    binding: str,
) -> None:
    """Send TEXT to an agent through a local gateway and print its answer."""
    if text is None:
        stream: TextIO = source or sys.stdin
        text = stream.read()
    if not text or not text.strip():
        raise click.UsageError("nothing to send: give TEXT, --file or text on stdin")
    config = load_config(resolve_config_path(config_path))
    task = asyncio.run(
        send_text(
            config,
            state or default_state_folder(),
            tenant,
            text,
            task_id=task_id,
            context_id=context_id,
            subject=subject,
            timeout=timeout,
            binding=binding,
        )
    )
    if as_json:
        click.echo(json.dumps(task, indent=2))
    else:
        click.echo(_answer(task))
    if task["status"]["state"] not in _SUCCEEDED:
        sys.exit(1)


def _answer(task: dict[str, Any]) -> str:
    """The task for people: its state and ids, the agent's last words, its artifacts."""
    status = task["status"]
    lines = [f"{status['state']}  task {task['id']}  context {task['contextId']}"]
    agent = [m for m in task.get("history", []) if m.get("role") == "ROLE_AGENT"]
    said = status.get("message") or (agent[-1] if agent else None)
    if said:
        lines += [p["text"] for p in said.get("parts", []) if "text" in p]
        reason = (said.get("metadata") or {}).get("reason")
        if reason:
            lines.append(f"(reason: {reason})")
    for artifact in task.get("artifacts", []):
        texts = [p["text"] for p in artifact.get("parts", []) if "text" in p]
        lines.append(f"[{artifact.get('name') or artifact['artifactId']}] " + " ".join(texts))
    return "\n".join(lines)


@main.command()
@_config_option
@_state_option
@click.option("--tenant", required=True, help="The agent the token is for.")
@click.option("--subject", default="caller", help="Who the caller is (the token's sub).")
@click.option("--lifetime", default=300, show_default=True, help="Seconds the token lasts.")
@_binding_option
@_clean_errors
def token(
    *,
    config_path: Path | None,
    state: Path | None,
    tenant: str,
    subject: str,
    lifetime: int,
    binding: str,
) -> None:
    """Print a gateway token of the local gateway for any A2A client (the agent checks it
    against the key set `looping gateway` serves, so keep that running)."""
    config = load_config(resolve_config_path(config_path))
    target = Target.of(config)
    click.echo(
        mint_token(
            gateway_key(state or default_state_folder()),
            jku=target.origin + JWKS_ROUTE,
            iss=target.origin,
            aud=target.audience(binding),
            tenant=tenant,
            sub=subject,
            lifetime=lifetime,
        )
    )


@main.group()
def tasks() -> None:
    """A caller's tasks, through a local gateway."""


def _tasks_call(
    config_path: Path | None,
    state: Path | None,
    tenant: str,
    method: str,
    params: dict[str, Any],
    *,
    binding: str,
) -> None:
    config = load_config(resolve_config_path(config_path))
    folder = state or default_state_folder()
    result = asyncio.run(call_agent(config, folder, tenant, method, params, binding=binding))
    click.echo(json.dumps(result, indent=2))


@tasks.command("list")
@_config_option
@_state_option
@click.option("--tenant", required=True)
@click.option("--context", "context_id", default=None, help="Only this conversation's tasks.")
@_binding_option
@_clean_errors
def tasks_list(
    config_path: Path | None,
    state: Path | None,
    tenant: str,
    context_id: str | None,
    binding: str,
) -> None:
    """The caller's tasks, newest first, as JSON."""
    params = {"contextId": context_id} if context_id else {}
    _tasks_call(config_path, state, tenant, "ListTasks", params, binding=binding)


@tasks.command("get")
@click.argument("task_id")
@_config_option
@_state_option
@click.option("--tenant", required=True)
@_binding_option
@_clean_errors
def tasks_get(
    task_id: str, config_path: Path | None, state: Path | None, tenant: str, binding: str
) -> None:
    """One task, as JSON."""
    _tasks_call(config_path, state, tenant, "GetTask", {"id": task_id}, binding=binding)


@tasks.command("cancel")
@click.argument("task_id")
@_config_option
@_state_option
@click.option("--tenant", required=True)
@_binding_option
@_clean_errors
def tasks_cancel(
    task_id: str, config_path: Path | None, state: Path | None, tenant: str, binding: str
) -> None:
    """Cancel a task; prints it, canceled."""
    _tasks_call(config_path, state, tenant, "CancelTask", {"id": task_id}, binding=binding)


@main.command("new")
@click.argument("name")
@_dir_option
@_clean_errors
def new(name: str, into: Path) -> None:
    """Write a new agent project NAME: an agent with a typed tool, its config, tests, CI."""
    target = write_project(name, into)
    click.echo(f"wrote {target}; its README says how to install, test, serve and ask it:")
    click.echo(f"  cd {target}")
    for line in _commands(target / "README.md", "## Install and test"):
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
@_dir_option
@_clean_errors
def plugin_new(name: str, into: Path) -> None:
    """Write a new plugin distribution NAME: entry point, hooks, a tool, tests, CI."""
    target = write_plugin(name, into)
    click.echo(f"wrote {target}; its README says how to install and test it")


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
@_clean_errors
def model_serve(port: int, reference: str | None) -> None:
    """Serve an OpenAI-compatible Chat Completions endpoint on 127.0.0.1 until Ctrl-C.

    With no --model it answers as TestModel does: it calls every tool it is offered once, with
    arguments valid for the tool's schema, then answers with what they returned (with no tools,
    a fixed text). Point a tenant's [tenants.<id>.model] base_url at it."""
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
