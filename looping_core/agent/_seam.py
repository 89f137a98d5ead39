"""The agent seam: what the runner hands a tenant's agent, and what the agent hands back."""

from __future__ import annotations

import abc
import difflib
import enum
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from looping_core._random import uuid4
from looping_core.config import LoopSettings, ModelPrice
from looping_core.content import Block, Message, ToolApproval, UserMessage
from looping_core.contract import Identity, ModelProvider, SubtaskLog, ToolContext
from looping_core.errors import LoopingError, ProblemsError
from looping_core.plugins import PluginHost

if TYPE_CHECKING:
    from looping_core.a2a import Message as A2AMessage
    from looping_core.agent._model import (
        ChatModel,  # the A2A wire types are the edge's; an agent only reads this one
    )

__all__ = [
    "Agent",
    "AgentContext",
    "AgentLoadError",
    "ApprovalLog",
    "ArtifactOut",
    "TurnEvents",
    "TurnInput",
    "TurnOutcome",
    "TurnResult",
    "load_agent_class",
]


@attrs.frozen
class AgentContext:
    """What an agent instance is built with: its tenant, the plugins that tenant uses, and its
    chat models from `[tenants.<id>.model]` (the model first, then its fallbacks; none when the
    tenant configures no model)."""

    tenant: str
    plugins: PluginHost
    models: tuple[ChatModel, ...] = ()
    context_window: int | None = None
    """The smallest `context_window` the tenant's models declare (every request must fit
    whichever of them serves it); `None` when none declares one."""
    loop: LoopSettings = attrs.field(factory=LoopSettings)
    """`[tenants.<id>.loop]`: the deployment's overrides of the agent's loop settings."""
    model_providers: Mapping[str, ModelProvider] = attrs.field(factory=dict)
    """The providers the tenant can make models with (built-in and its plugins'), for an agent
    that names its own model when the config names none."""
    environ: Mapping[str, str] = attrs.field(factory=lambda: os.environ)
    """Where `env:NAME` secrets are read (the server's environment, read once at startup), for
    an agent that names its own model with an API key."""
    prices: Mapping[str, ModelPrice] = attrs.field(factory=dict)
    """`[prices]`: what each model's tokens cost, so a turn's model calls have a cost."""


class SessionLog(Protocol):
    """The caller's session for this conversation, durable: what an agent reads and writes."""

    async def history(self) -> list[Message]:
        """The session's messages so far, in order."""

    async def this_turn(self) -> list[Message]:
        """The messages this turn has added so far (not empty: the turn is resumed)."""

    async def append(self, messages: Sequence[Message]) -> None:
        """Add messages at the end, as this turn's; durable when this returns."""

    async def arrivals(self) -> list[Message]:
        """Messages the caller sent to this task since its turn began that the session does not
        hold yet (follow-ups to a running task), now added to it, oldest first; each is given
        once, and a turn resumed after a crash is not given again what it already took."""

    def subagent(self, scope: str) -> SessionLog:
        """A durable session of its own for a subagent of this turn (one per `scope`): it never
        sees the caller's conversation, and takes no follow-ups."""

    async def displace(self, displaced: Sequence[Message], replacement: Sequence[Message]) -> bool:
        """Remove the oldest messages if they are `displaced` (and put `replacement` in their
        place), in one write. `False`, changing nothing, when the session no longer begins with
        them (another turn of the same conversation changed it)."""


class ApprovalLog(Protocol):
    """The task's tool calls that need the caller's approval, durable: each is asked for, then
    decided by the caller (the edge writes the decisions with their message), then begun and
    ended by the turn that runs it. `start` is the guard that makes an approved call run at
    most once: only one caller of it, ever, gets `True`."""

    async def ask(self, approvals: Sequence[ToolApproval]) -> None:
        """Record calls that wait for the caller (before the turn ends waiting for them)."""

    async def approvals(self) -> list[ToolApproval]:
        """Every call of the task that needed approval, with its state, oldest first."""

    async def start(self, call_id: str) -> bool:
        """Mark an approved call begun, durably, before running it; `False`: it must not run
        (denied, or begun before: by a run cut off by a crash, or by another worker)."""

    async def finish(self, call_id: str) -> None:
        """Mark a begun call ended, once its result is stored."""


class TurnEvents(Protocol):
    """What a running turn tells its caller before it ends: stored as the task's events, sent
    to every stream of the task, pushed only where `[push] progress` says so."""

    async def progress(self, blocks: Sequence[Block]) -> None:
        """The task stays WORKING with `blocks` as its status message (what it is doing)."""

    async def artifact(
        self, artifact: ArtifactOut, *, append: bool = False, last_chunk: bool = False
    ) -> None:
        """An artifact before the turn ends, or a chunk of one (`append`: its blocks add to the
        artifact with the same `artifact_id`); chunks close together are sent as one event.
        The turn's result must still hold the artifact whole: that is what the task keeps."""


@attrs.frozen
class TurnInput:
    """One turn: the new user message and the task's earlier messages, as content blocks."""

    task_id: str
    context_id: str
    caller: Identity
    message: UserMessage
    history: Sequence[Message] = ()
    """The task's earlier messages as content (converted when first read: an agent that reads
    its `session` instead pays nothing for them)."""
    a2a_message: A2AMessage | None = None
    """The message as it arrived (metadata, extensions, reference task ids)."""
    session: SessionLog | None = None
    """The caller's durable session for this context (one per tenant, issuer, subject and
    contextId), when the runner keeps sessions."""
    tool_context: ToolContext | None = None
    """What the tenant's plugins' tool families build this caller's tools with."""
    subtasks: SubtaskLog | None = None
    """The task's durable subtasks, for an agent that delegates (when the runner keeps them)."""
    events: TurnEvents | None = None
    """Progress and early artifacts of this turn, for streams (when the runner keeps them)."""
    approvals: ApprovalLog | None = None
    """The task's tool calls that wait for the caller's approval (when the runner keeps them;
    without, a call that needs approval is never run)."""

    async def progress(self, *blocks: Block) -> None:
        """Tell the caller what the turn is doing now (a status message; the task stays
        WORKING). Nothing happens without `events` (a turn run outside a server)."""
        if self.events is not None and blocks:
            await self.events.progress(blocks)


class TurnOutcome(enum.Enum):
    """How a turn ends: a terminal state, or an interruption that waits for the caller."""

    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    REJECTED = "TASK_STATE_REJECTED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"


@attrs.frozen
class ArtifactOut:
    """An output of the turn (A2A: outputs belong in artifacts, not messages)."""

    name: str
    blocks: tuple[Block, ...]
    description: str = ""
    artifact_id: str = attrs.field(factory=lambda: str(uuid4()))


@attrs.frozen
class TurnResult:
    outcome: TurnOutcome = TurnOutcome.COMPLETED
    reply: tuple[Block, ...] = ()
    """The agent's message (kept in history; for an interruption, also the status message)."""
    artifacts: tuple[ArtifactOut, ...] = ()
    metadata: Mapping[str, Any] | None = None
    """What the turn reports about itself (JSON values): it becomes the task's metadata."""
    reason: str | None = None
    """Why a turn failed or was refused, as a code for programs (`MODEL_UNAVAILABLE`); it goes
    in the status message's metadata. Words for people belong in `reply`."""
    direct_message: bool = False
    """Answer a blocking `SendMessage` with `reply` as a direct A2A `Message` instead of the task
    (for an answer that needs no task: a greeting, a lookup). Only for an ending turn with a
    reply; the task is still kept (for a retried send, history and pushes) and streams still
    see its events."""
    output: Any = None
    """A structured answer, as the app's type (an agent that answers in a schema sets it; its
    JSON is the data part of the reply and the answer artifact). Not stored: for the app's
    code that runs after the loop (`LoopingAgent.turn_result`)."""


class Agent(abc.ABC):
    """Base class of every tenant's agent. One instance per tenant serves all its turns."""

    def __init__(self, context: AgentContext) -> None:
        self.context = context

    @abc.abstractmethod
    async def run(self, turn: TurnInput) -> TurnResult:
        """Handle one turn. Raising fails the task (the error is logged, not shown)."""

    def output_modes(self) -> tuple[str, ...] | None:
        """The media types the agent's answers are made of, when it declares them: a caller
        whose `acceptedOutputModes` takes none of them is refused before its turn starts
        (`ContentTypeNotSupportedError`). `None` (the default): not declared, nobody refused."""
        return None

    def canceled_reply(self) -> tuple[Block, ...]:
        """What a caller who cancels a task is told (the status message of the canceled task);
        nothing by default. The words are the app's."""
        return ()

    async def canceled_metadata(self, turn: TurnInput) -> Mapping[str, Any] | None:
        """The metadata a task canceled during `turn` keeps (what its turn had done: a
        delegating agent's subtasks as they stood and the usage spent); called once the turn
        stopped. None by default."""
        return None

    async def aclose(self) -> None:
        """Release what the agent holds (its models' connections); called once at shutdown."""
        for model in self.context.models:
            await model.aclose()


def _import_agent_module(module_name: str, beside: Path | None) -> ModuleType:
    """The module, from the installed ones first, then from `beside` if it is there (its folder
    goes on `sys.path`, after the installed packages, only then)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".", maxsplit=1)[0]
        if beside is None or exc.name != top:
            raise
        if not ((beside / f"{top}.py").is_file() or (beside / top / "__init__.py").is_file()):
            raise
        if str(beside) not in sys.path:
            sys.path.append(str(beside))
        importlib.invalidate_caches()
        return importlib.import_module(module_name)


class AgentLoadError(ProblemsError):
    """A tenant's `agent` cannot be imported or is not an `Agent` subclass; `problems` lists
    every reason when several tenants' agents fail."""

    def __init__(self, message: str, *, problems: Sequence[str] = ()) -> None:
        self.problems = tuple(problems) or (message,)
        super().__init__(message)


def load_agent_class(tenant: str, reference: str, *, beside: Path | None = None) -> type[Agent]:
    """Import `"package.module:ClassName"`; `AgentLoadError` naming the tenant and the fix.
    `beside`: the config file's folder, where a module no installed distribution provides is
    looked for (`my_agents.py` next to `looping.toml`), wherever `looping` runs from."""
    module_name, _, attribute = reference.partition(":")
    where = f"tenants.{tenant}.agent"
    try:
        module = _import_agent_module(module_name, beside)
    except LoopingError as exc:  # the module's own mistake, said by core (a tool's hints, ...)
        raise AgentLoadError(f"{where}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        folder = f", put it in {beside}," if beside is not None else ""
        raise AgentLoadError(
            f"{where}: cannot import {module_name!r} ({type(exc).__name__}: {exc}); install the "
            f"distribution that provides it{folder} or fix the module path"
        ) from exc
    target: object = module
    for part in attribute.split("."):
        found = getattr(target, part, None)
        if found is None:
            names = [name for name in dir(target) if not name.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            raise AgentLoadError(
                f"{where}: {module_name!r} has no attribute {part!r}{guess}; point it at your "
                "agent class"
            )
        target = found
    if not (isinstance(target, type) and issubclass(target, Agent)):
        raise AgentLoadError(
            f"{where}: {reference!r} is not a subclass of looping_core.agent.Agent; point it at "
            "your agent class"
        )
    return target
