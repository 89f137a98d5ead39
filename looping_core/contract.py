"""Types exchanged between the host and plugins (contract version 3).

Everything here is a frozen attrs class or a small Protocol: plugins return these from their hooks
and receive them as arguments. Changing a field in an incompatible way means bumping
`looping_core.hookspecs.CONTRACT_VERSION` (3 passes each tool handler its `ToolCall`, where 2 had
it in a context variable; 2 gave tools `ToolContext.store`, calls on the store's own thread,
where 1 gave them the raw database).
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs

if TYPE_CHECKING:
    import peewee

__all__ = [
    "SUBTASK_STATES",
    "ConfigPath",
    "Identity",
    "ModelProvider",
    "PluginInfo",
    "PluginStore",
    "SecretRef",
    "SessionRef",
    "StoreAccess",
    "SubtaskLog",
    "SubtaskRecipe",
    "SubtaskRecord",
    "SubtaskType",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolFamily",
    "Turn",
    "Workspace",
    "WorkspaceBacking",
]

_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_name(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not _NAME.match(value):
        raise ValueError(
            f"{type(instance).__name__}.{attribute.name} must be 1-63 characters of lowercase "
            f"letters, digits, '_', '.' or '-', starting with a letter; got {value!r}"
        )


def _check_sentence(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value.strip() or "\n" in value:
        raise ValueError(
            f"{type(instance).__name__}.{attribute.name} must be one non-empty line of text"
        )


class ConfigPath(str):
    """A file or folder a plugin's settings name (type a config field with it): a relative one
    is the config file's folder's, made absolute as the settings are read, wherever `looping`
    runs from. A default of `ConfigPath(".")` is that folder itself."""

    __slots__ = ()


@attrs.frozen(repr=False)
class SecretRef:
    """A secret given by indirection: the name of an environment variable, never the value.

    Config files write it as `"env:NAME"`. The value is read only when `value()` is called, so a
    config object can be printed, logged or compared without leaking anything.
    """

    env: str = attrs.field()

    @env.validator
    def _check_env(self, attribute: attrs.Attribute[str], value: str) -> None:
        if not _ENV_NAME.match(value):
            raise ValueError(f"not a valid environment variable name: {value!r}")

    @classmethod
    def parse(cls, text: str) -> SecretRef:
        """Parse `"env:NAME"`; anything else is refused because secrets never live inline."""
        scheme, sep, name = text.partition(":")
        if sep != ":" or scheme != "env" or not name:
            raise ValueError(
                'secrets are given by indirection as "env:NAME" (the name of an environment '
                "variable), never inline"
            )
        return cls(name)

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether the variable is present and non-empty."""
        return bool((os.environ if environ is None else environ).get(self.env))

    def value(self, environ: Mapping[str, str] | None = None) -> str:
        """Read the secret now. Raises `KeyError` naming the variable (not a value) if unset."""
        found = (os.environ if environ is None else environ).get(self.env)
        if not found:
            raise KeyError(f"environment variable {self.env} is not set")
        return found

    def __repr__(self) -> str:
        return f"SecretRef('env:{self.env}')"

    def __str__(self) -> str:
        return f"env:{self.env}"


@attrs.frozen
class PluginInfo:
    """Who a plugin is: returned once by the `plugin_info` hook.

    - `capability`: one sentence a human reads in `looping plugins list`.
    - `config_type`: an attrs class that `[plugins.<key>]` is structured into (unknown keys are
      refused); `None` means the plugin takes no config and the table must be absent or empty.
    - `secrets`: names of `config_type` fields of type `SecretRef` that must resolve at startup.
    """

    capability: str = attrs.field(validator=_check_sentence)
    config_type: type[Any] | None = None
    secrets: tuple[str, ...] = attrs.field(default=(), converter=tuple)


_T = TypeVar("_T")


class StoreAccess(Protocol):
    """The store, for a plugin's own tables (see `PluginStore`): every call runs on the store's
    own thread, where all of core's database work runs, so a tool's writes wait their turn at the
    store's writer lock and never meet "database is locked"."""

    async def run(self, fn: Callable[[peewee.Database], _T]) -> _T:
        """Run `fn(db)` on the store's thread in a write transaction and await its result. `fn`
        is synchronous (peewee queries on models bound to `db`) and runs exactly once, in a
        transaction of its own; if it raises, its writes are undone. It must not commit or roll
        back itself."""


@attrs.frozen
class ToolContext:
    """What a tool factory knows about the agent instance it builds tools for."""

    tenant: str
    instance_id: str
    workspace: Workspace | None = None
    store: StoreAccess | None = attrs.field(default=None, repr=False)
    """The store, for tools of plugins that own tables (`await context.store.run(fn)`); `None`
    outside a served turn."""


@attrs.frozen
class Tool:
    """One tool an agent may call: a JSON-Schema described input and an async handler,
    `handler(arguments, call)`: the model's arguments (already checked against the schema) and
    the `ToolCall` it serves (its id, its name, the caller's `ToolContext`).

    `requires_approval`: the caller must approve a call before it runs, always (`True`) or when
    `requires_approval(call, arguments)` says so (a rule that raises counts as yes; it runs on
    the event loop, so it must be quick and must not wait on anything). The turn
    then ends `INPUT_REQUIRED` with the pending calls; an approved call runs at most once.
    `idempotent`: running a call twice does no harm, so one cut off by a crash after it began
    may run again (otherwise the model is told its outcome is unknown)."""

    name: str = attrs.field(validator=_check_name)
    description: str
    input_schema: Mapping[str, Any]
    handler: Callable[[Mapping[str, Any], ToolCall], Awaitable[Any]]
    requires_approval: bool | Callable[[ToolCall, Mapping[str, Any]], bool] = attrs.field(
        default=False, kw_only=True
    )
    idempotent: bool = attrs.field(default=False, kw_only=True)


class ToolError(Exception):
    """Raise from a tool handler to answer the model with an error result saying `message` (a
    fact it can act on); any other exception is logged and shown only as its type's name."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@attrs.frozen
class ToolCall:
    """The model's call a tool handler is running for: its handler's second argument.

    `id` is the call's id as the model gave it; it is the same when a turn resumed after a crash
    runs a call again whose result was never stored, so a handler with side effects can use it as
    an idempotency key (and skip, or look up, what it already did).
    """

    id: str
    name: str
    context: ToolContext | None = attrs.field(default=None, eq=False, repr=False)
    """What the agent built this turn's tools with (the caller's tenant, instance, workspace);
    `None` when the loop was run without one."""


@attrs.frozen
class ToolFamily:
    """A named factory that builds a set of tools for one agent instance.

    Families are the unit tenants and subtask recipes select by name, so names are unique across
    all selected plugins.
    """

    name: str = attrs.field(validator=_check_name)
    description: str
    factory: Callable[[ToolContext], Sequence[Tool]]
    aclose: Callable[[], Awaitable[None]] | None = None
    """Called once when the server stops, to release what the family's tools hold open
    (connections, processes); it must not raise. `None`: nothing to release."""


@attrs.frozen
class SubtaskRecipe:
    """How a subagent runs one subtask: the plugin's own instructions and the tools it may use."""

    instructions: str
    tool_families: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    max_rounds: int | None = None
    may_delegate: bool = False
    """The subagent may plan subtasks of its own (as deep as the agent's round policy allows)."""


@attrs.frozen
class SubtaskType:
    """A kind of subtask the delegation runtime can schedule.

    `params_type` is an attrs class the subtask's parameters are structured into (unknown keys
    refused); `recipe` turns validated parameters into a `SubtaskRecipe`.
    """

    key: str = attrs.field(validator=_check_name)
    description: str
    params_type: type[Any]
    recipe: Callable[[Any], SubtaskRecipe]
    result_type: Any = None
    """The type of the subagent's answer, when it hands back data: an attrs class, a
    dataclass, a `TypedDict` or a JSON Schema of an object (as `LoopingAgent.output_type`).
    The subtask's `result` is then that JSON object, checked against its schema; `None`: the
    subagent's text."""


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


SUBTASK_STATES = ("pending", "running", "done", "failed", "canceled")
"""A subtask's states: waiting for its dependencies or a slot, running, and the three ends."""


@attrs.frozen
class SubtaskRecord:
    """One subtask of a turn's plan, as stored: what it is, where it stands and what it gave.

    `params` and `result` are JSON values; `fingerprint` identifies what the subtask's subagent
    was run with (its type, params, recipe and model), so a resumed turn knows whether its
    steps still apply. Times are microseconds since the epoch."""

    task_id: str
    subtask_id: str
    type_key: str
    params: Mapping[str, Any]
    depends_on: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    round: int = 0
    state: str = attrs.field(default="pending", validator=attrs.validators.in_(SUBTASK_STATES))
    result: Any = None
    reason: str | None = None
    attempts: int = 0
    fingerprint: str | None = None
    wave: int | None = None
    usage: Mapping[str, int] | None = None
    created_us: int = 0
    started_us: int | None = None
    ended_us: int | None = None
    cost: float | None = None
    """What its subagent's model calls cost, by the deployment's `[prices]`."""


class SubtaskLog(Protocol):
    """A turn's subtasks, durable: what the delegation runtime reads and writes."""

    async def add(self, subtasks: Sequence[SubtaskRecord]) -> None:
        """Store a plan's subtasks, all or none."""

    async def subtasks(self) -> list[SubtaskRecord]:
        """Every subtask of the task, in the order they were added."""

    async def update(self, subtask: SubtaskRecord) -> None:
        """Store the subtask's new state (matched by its id)."""


@attrs.frozen
class PluginStore:
    """Tables a plugin owns, created and upgraded by the plugin itself.

    `ensure_tables(db, from_version)` is idempotent DDL run at every start; `from_version` is the
    version core recorded last time (0 on first start) and `version` is recorded after it
    succeeds. `tables` names every table it creates so clashes are found at startup. Core's own
    migration journal is never touched by a plugin.
    """

    plugin: str
    version: int = attrs.field(validator=attrs.validators.ge(1))
    ensure_tables: Callable[[peewee.Database, int], None]
    tables: tuple[str, ...] = attrs.field(default=(), converter=tuple)


class Workspace(Protocol):
    """The file area an agent instance works in."""

    async def read_bytes(self, path: str) -> bytes: ...

    async def write_bytes(self, path: str, data: bytes) -> None: ...

    async def list(self, prefix: str = "") -> Sequence[str]: ...


@attrs.frozen
class WorkspaceBacking:
    """Where workspaces live (a directory, a bucket...). At most one plugin may provide it."""

    name: str = attrs.field(validator=_check_name)
    description: str
    open: Callable[[str, str], Workspace]
    """`open(tenant, instance_id)` returns that instance's workspace."""


@attrs.frozen
class ModelProvider:
    """A named factory for chat models, so provider support can ship as a plugin.

    `factory(model, options)` builds a chat model for the model name the app asks for; the chat
    model interface itself belongs to the agent runtime.
    """

    name: str = attrs.field(validator=_check_name)
    description: str
    factory: Callable[[str, Mapping[str, Any]], Any]


@attrs.frozen
class Identity:
    """Who is calling, as the verified gateway token says: the tenant (which agent), the issuer
    (which gateway) and the subject (which caller). Everything a caller owns is scoped to it."""

    tenant: str
    issuer: str
    subject: str


@attrs.frozen
class SessionRef:
    """Which conversation a session hook is about: the caller and the context."""

    caller: Identity
    context_id: str

    @property
    def tenant(self) -> str:
        return self.caller.tenant

    @property
    def issuer(self) -> str:
        return self.caller.issuer

    @property
    def subject(self) -> str:
        return self.caller.subject


@attrs.frozen
class Turn:
    """One incoming turn, as turn gates see it before the agent runs."""

    session: SessionRef
    task_id: str
    message: Any
    """The incoming message (the conversation vocabulary's user message)."""
