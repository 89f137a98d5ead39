"""Talking to an agent the way a gateway does: `looping gateway`, `send`, `token` and `tasks`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any, TextIO

import click

from looping_core.cli._approvals import asked_decisions, decisions_part, pending_lines
from looping_core.cli._common import (
    clean_errors,
    config_option,
)
from looping_core.cli._main import main
from looping_core.config import Config, load_config, resolve_config_path
from looping_core.gateway.internal import (
    JWKS_ROUTE,
    Target,
    call_agent,
    default_state_folder,
    gateway_key,
    mint_token,
    pending_calls,
    run_gateway,
    send_text,
)
from looping_core.modelserver import DEFAULT_PORT

__all__ = ["gateway", "send", "tasks", "token"]

state_option = click.option(
    "--state",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The local gateway's state folder, which keeps its key (default: "
    "$LOOPING_GATEWAY_STATE, else ~/.local/state/looping/gateway).",
)
binding_option = click.option(
    "--binding",
    type=click.Choice(["jsonrpc", "rest", "grpc"]),
    default="jsonrpc",
    show_default=True,
    help="The A2A binding: JSON-RPC, HTTP+JSON, or gRPC (`[server] grpc_port`; the grpc "
    "extra). A token for each is for its own URL.",
)
_SUCCEEDED = {"TASK_STATE_COMPLETED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}


@main.command()
@config_option
@state_option
@click.option(
    "--console",
    is_flag=True,
    help="Also serve the development console: a page to send turns and watch what the agent "
    "did (its URL, with its token, is printed). The agent shows timelines only with "
    "[server] inspection = true.",
)
@clean_errors
def gateway(config_path: Path | None, state: Path | None, console: bool) -> None:
    """Run a local gateway on the loopback origin the config trusts, until Ctrl-C."""
    config = load_config(resolve_config_path(config_path))
    target = Target.of(config)
    click.echo(f"local gateway on {target.origin} for {target.endpoint}; Ctrl-C stops it")
    if console and not config.server.inspection:
        click.echo(
            f"note: {config.source} has [server] inspection off, so the console shows streams "
            "and tasks but not what the agent stored (timelines, conversations, plans, "
            "pushes); set it to true for development"
        )

    def announce(url: str) -> None:
        click.echo(f"console: {url}")

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            run_gateway(config, state or default_state_folder(), console=console, announce=announce)
        )


@main.command()
@click.argument("text", required=False)
@config_option
@state_option
@click.option("--tenant", required=True, help="The agent to ask (a [tenants.<id>] of the config).")
@click.option("--file", "source", type=click.File("r"), help="Send this file's text ('-': stdin).")
@click.option("--task", "task_id", default=None, help="Continue this task (it asked for input).")
@click.option("--context", "context_id", default=None, help="Continue this conversation.")
@click.option("--subject", default="caller", help="Who the caller is (the token's sub).")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait.")
@click.option(
    "--approve",
    "approved",
    multiple=True,
    metavar="CALL_ID",
    help="Approve this tool call the task waits for ('all': every one); with --task.",
)
@click.option(
    "--deny",
    "denied",
    multiple=True,
    metavar="CALL_ID",
    help="Deny this tool call the task waits for ('all': every one); with --task.",
)
@click.option("--reason", default="", help="Why the calls are denied (the model is told).")
@binding_option
@clean_errors
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
    approved: tuple[str, ...],
    denied: tuple[str, ...],
    reason: str,
    binding: str,
) -> None:
    """Send TEXT to an agent through a local gateway and print its answer.

    A task that waits for the caller's approval of tool calls is answered with --task and
    --approve/--deny (each call's id is printed); run in a terminal, `send` asks instead."""
    deciding = bool(approved or denied)
    if deciding and not task_id:
        raise click.UsageError("--approve and --deny answer a task: name it with --task")
    if text is None and not deciding:
        stream: TextIO = source or sys.stdin
        text = stream.read()
    text = text or ""
    if not text.strip() and not deciding:
        raise click.UsageError("nothing to send: give TEXT, --file or text on stdin")
    config = load_config(resolve_config_path(config_path))
    folder = state or default_state_folder()

    def sent(words: str, task: str | None, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return asyncio.run(
            send_text(
                config, folder, tenant, words, task_id=task, context_id=context_id,
                subject=subject, timeout=timeout, binding=binding, parts=parts,
            )
        )  # fmt: skip

    parts: list[dict[str, Any]] = []
    if deciding:
        assert task_id is not None
        waiting = pending_calls(asyncio.run(_get_task(config, folder, tenant, task_id, subject)))
        parts = [decisions_part(waiting, approved, denied, reason)]
    task = sent(text, task_id, parts)
    interactive = not as_json and sys.stdin.isatty() and sys.stdout.isatty()
    while True:
        if as_json:
            click.echo(json.dumps(task, indent=2))
        else:
            lines, answer_how = pending_lines(task, tenant)
            click.echo("\n".join([_answer(task), *lines]))
            hint = _why(task, config, tenant) or (None if interactive else answer_how)
            if hint:
                click.echo(hint, err=True)
        waiting = pending_calls(task)
        if not waiting or not interactive:
            break
        task = sent("", task["id"], [asked_decisions(waiting)])
    if task["status"]["state"] not in _SUCCEEDED:
        sys.exit(1)


async def _get_task(
    config: Config, state: Path, tenant: str, task_id: str, subject: str
) -> dict[str, Any]:
    task: dict[str, Any] = await call_agent(
        config, state, tenant, "GetTask", {"id": task_id}, subject=subject
    )
    return task


def _why(task: dict[str, Any], config: Config, tenant: str) -> str | None:
    """What a failed turn's reason means for the person at the terminal, and what to do."""
    message = task["status"].get("message") or {}
    reason = (message.get("metadata") or {}).get("reason")
    if reason != "MODEL_UNAVAILABLE":
        return None
    own = config.tenants.get(tenant)
    model = own.model if own is not None else None
    if model is None:
        return None
    endpoints = ", ".join(
        choice.base_url or f"the {choice.provider or 'openai'} provider's"
        for choice in (model, *model.fallback)
    )
    command = "looping model serve"
    local = urllib.parse.urlsplit(model.base_url or "")
    if local.hostname == "127.0.0.1" and local.port not in (None, DEFAULT_PORT):
        command += f" --port {local.port}"
    return (
        f"The model endpoint of tenant {tenant!r} did not answer ({endpoints}). Start a model "
        f"there, or an offline stand-in with `{command}`, or aim [tenants.{tenant}.model] "
        "base_url at a running one."
    )


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
        parts = artifact.get("parts", [])
        texts = [p["text"] for p in parts if "text" in p]
        lines.append(" ".join([f"[{artifact.get('name') or artifact['artifactId']}]", *texts]))
        # A structured answer, formatted (its data part as the caller's program reads it).
        lines += [json.dumps(p["data"], indent=2, ensure_ascii=False) for p in parts if "data" in p]
    return "\n".join(lines)


@main.command()
@config_option
@state_option
@click.option("--tenant", required=True, help="The agent the token is for.")
@click.option("--subject", default="caller", help="Who the caller is (the token's sub).")
@click.option("--lifetime", default=300, show_default=True, help="Seconds the token lasts.")
@binding_option
@clean_errors
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
    # On stderr, so `TOKEN="$(looping token ...)"` still takes the token alone: a client given
    # an expired token hears a bare 401 (the SDK shows no reason), so say when that comes.
    until = time.strftime("%H:%M:%S", time.localtime(time.time() + lifetime))
    click.echo(
        f"valid for {lifetime} s (until {until}); mint another then, or ask for longer with "
        "--lifetime",
        err=True,
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
@config_option
@state_option
@click.option("--tenant", required=True)
@click.option("--context", "context_id", default=None, help="Only this conversation's tasks.")
@binding_option
@clean_errors
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
@config_option
@state_option
@click.option("--tenant", required=True)
@binding_option
@clean_errors
def tasks_get(
    task_id: str, config_path: Path | None, state: Path | None, tenant: str, binding: str
) -> None:
    """One task, as JSON."""
    _tasks_call(config_path, state, tenant, "GetTask", {"id": task_id}, binding=binding)


@tasks.command("cancel")
@click.argument("task_id")
@config_option
@state_option
@click.option("--tenant", required=True)
@binding_option
@clean_errors
def tasks_cancel(
    task_id: str, config_path: Path | None, state: Path | None, tenant: str, binding: str
) -> None:
    """Cancel a task; prints it, canceled."""
    _tasks_call(config_path, state, tenant, "CancelTask", {"id": task_id}, binding=binding)
