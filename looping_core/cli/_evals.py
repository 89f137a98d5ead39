"""`looping eval`: a dataset's cases as real turns through the local gateway, against the agent
the config serves (started here when nothing answers at its URL), with a table, JSON and JUnit
reports and an exit code that says whether it passed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import click

from looping_core.cli._common import clean_errors, config_option
from looping_core.cli._gateway import binding_option, state_option
from looping_core.cli._main import main
from looping_core.config import Config, load_config, resolve_config_path
from looping_core.evals import (
    CaseResult,
    Dataset,
    Grader,
    failure_lines,
    judge_models,
    junit_xml,
    load_dataset,
    report_json,
    run_dataset,
    summarize,
    table,
)
from looping_core.gateway.internal import TurnSender, default_state_folder
from looping_core.server import create_app, listen

__all__ = ["eval_dataset"]


@main.command("eval")
@click.argument("dataset_path", metavar="DATASET", type=click.Path(path_type=Path))
@config_option
@state_option
@click.option(
    "--url",
    default=None,
    help="The agent's base URL, when it is served somewhere else than the config's "
    "[server] public_url.",
)
@click.option("--concurrency", default=4, show_default=True, help="Case runs at once.")
@click.option(
    "--repeat", default=1, show_default=True, help="Runs of each case (for models that vary)."
)
@click.option(
    "--min-pass-rate",
    type=click.FloatRange(0, 1),
    default=None,
    help="Pass when at least this share of the runs passed (default: every run must).",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the results.")
@click.option(
    "--junit", "junit_path", type=click.Path(path_type=Path), help="Write a JUnit XML report."
)
@click.option("--timeout", default=120.0, show_default=True, help="Seconds a turn may take.")
@binding_option
@clean_errors
def eval_dataset(
    dataset_path: Path,
    *,
    config_path: Path | None,
    state: Path | None,
    url: str | None,
    concurrency: int,
    repeat: int,
    min_pass_rate: float | None,
    json_path: Path | None,
    junit_path: Path | None,
    timeout: float,
    binding: str,
) -> None:
    """Run DATASET's cases as real turns and check their outcomes (see the evals tutorial).

    The agent is the one the config serves, at its public URL (or --url). When nothing answers
    there, `eval` serves it itself for the run. Exit 0 when every run passed, or at least
    --min-pass-rate of them; 1 otherwise."""
    if concurrency < 1 or repeat < 1:
        raise click.UsageError("--concurrency and --repeat are at least 1")
    dataset = load_dataset(dataset_path)
    config = load_config(resolve_config_path(config_path))
    if url is not None:
        config = attrs.evolve(config, server=attrs.evolve(config.server, public_url=url))
    runs = len(dataset.cases) * repeat
    with click.progressbar(length=runs, label="eval", file=sys.stderr) as bar:
        results = asyncio.run(
            _run(
                dataset, config, state or default_state_folder(), binding=binding,
                concurrency=concurrency, repeat=repeat, timeout=timeout,
                progress=lambda _: bar.update(1), serve=url is None,
            )
        )  # fmt: skip
    click.echo(table(results))
    for line in failure_lines(results):
        click.echo(f"FAILED {line}")
    report = report_json(results, min_pass_rate)
    if json_path is not None:
        json_path.write_text(_json(report), encoding="utf-8")
    if junit_path is not None:
        junit_path.write_text(junit_xml(results, dataset_path.stem), encoding="utf-8")
    if not summarize(results).met(min_pass_rate):
        sys.exit(1)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


async def _run(
    dataset: Dataset,
    config: Config,
    state: Path,
    *,
    binding: str,
    concurrency: int,
    repeat: int,
    timeout: float,
    progress: Callable[[CaseResult], None],
    serve: bool,
) -> list[CaseResult]:
    grader = None
    if dataset.judge is not None:
        grader = Grader(dataset.judge, judge_models(dataset.judge, config, os.environ))
    try:
        async with _agent(config, serve), TurnSender(config, state, binding=binding) as sender:
            send = functools.partial(sender.send, timeout=timeout)
            return await run_dataset(
                dataset, send, concurrency=concurrency, repeat=repeat, grader=grader,
                progress=progress,
            )  # fmt: skip
    finally:
        if grader is not None:
            await grader.aclose()


@contextlib.asynccontextmanager
async def _agent(config: Config, serve: bool) -> AsyncIterator[None]:
    """The agent at the config's URL: the one serving there, or (`serve`, nothing answers) one
    served here for the run."""
    if not serve or await _answers(config.server.base_url):
        yield
        return
    app = create_app(config)
    listener = await listen(app, config.server.host, config.server.port)
    try:
        yield
    finally:
        await listener.cleanup()


async def _answers(base_url: str) -> bool:
    """Whether an agent answers at `base_url` (its health route)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(f"{base_url}/healthz") as response,
        ):
            return response.status < 500
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
