"""Running an agent: `looping check`, `keys`, `serve` and `worker`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import attrs
import click

from looping_core._logs import configure as configure_logs
from looping_core.a2a import generate_signing_key
from looping_core.cli._common import (
    clean_errors,
    config_option,
    log_level_option,
    no_database_yet,
    on_store,
    shown_url,
    tenants_of,
)
from looping_core.cli._main import main
from looping_core.config import MAX_WORKERS, load_config, resolve_config_path
from looping_core.errors import ConfigError, LoopingError, problem_list
from looping_core.plugins import PluginHost
from looping_core.server import internal as server
from looping_core.store.internal import (
    StoreError,
    migration_status,
    nothing_applied,
)

__all__ = ["check", "keys", "serve", "worker"]


@main.command()
@config_option
@click.option("--connect", is_flag=True, help="Also open the store and show its migrations.")
@clean_errors
def check(config_path: Path | None, connect: bool) -> None:
    """Run every check `serve` runs before it listens: the config, the signing key, the store
    URL and its driver, the plugins and the agents, the packages metrics, traces and gRPC need,
    and that nothing else holds its ports. Exit 1 listing every problem. With --connect, also
    open the store and show its migration state."""
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
    problems.extend(server.listen_problems(config))
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
                if no_database_yet(config)  # looking must not create it
                else on_store(config, migration_status)
            )
        except StoreError as exc:
            problems.append(str(exc))
    if problems:
        raise LoopingError(f"{config.source}: {problem_list('startup', problems)}")
    click.echo(f"{config.source}: OK. Plugins: {plugins}. Tenants: {tenants_of(config)}.")
    if status is not None:
        pending = ", ".join(f"{m.version:04d}" for m in status.pending)
        state = (
            f"pending {pending} (the server applies them when it starts)"
            if pending
            else "up to date"
        )
        click.echo(f"store: {shown_url(config.store.url)}: migrations {state}")


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
@config_option
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
@log_level_option
@clean_errors
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
@config_option
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
@log_level_option
@clean_errors
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
