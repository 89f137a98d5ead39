"""The plugin contract: every hook a plugin may implement, and `CONTRACT_VERSION`.

A plugin is any importable object (usually a module) named by an entry point in the
`looping.plugins` group; the entry-point name is its key. It implements hooks by decorating
functions of the same name with `looping_core.hookspecs.hookimpl`. An implementation may declare
any subset of a hook's parameters, in any order.

The host calls each plugin's implementation on its own (never through an untyped
`pm.hook.<name>(...)`), in the order of `[plugins] enabled`, so it knows which plugin gave what
and can hand every plugin its own structured config as `config`.

Hooks, by lifecycle:

- identity, called once at startup: `contract_version` (required), `plugin_info` (required);
- contributions, called once at startup after the config is validated: `tool_families`,
  `subtask_types`, `stores`, `workspace_backing`, `model_providers`;
- runtime, called while agents run and allowed to be `async def`: `should_handle_turn`,
  `messages_displaced`.

`docs/plugin-hooks.md` documents each hook with its exact signature; a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

import pluggy

from looping_core.contract import (
    ModelProvider,
    PluginInfo,
    PluginStore,
    SessionRef,
    SubtaskType,
    ToolFamily,
    Turn,
    WorkspaceBacking,
)

__all__ = [
    "CONTRACT_CHANGES",
    "CONTRACT_VERSION",
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "contract_version",
    "hookimpl",
    "hookspec",
    "messages_displaced",
    "model_providers",
    "plugin_info",
    "should_handle_turn",
    "stores",
    "subtask_types",
    "tool_families",
    "workspace_backing",
]

CONTRACT_VERSION = 3
"""The version of this contract. A plugin targeting any other version is refused at startup.

3: a tool's handler is given the call it serves, `handler(arguments, call)`, in place of
`current_tool_call()`.
2: tools reach a plugin's tables through `ToolContext.store` (calls on the store's own thread),
no longer through the raw `ToolContext.database`."""

CONTRACT_CHANGES = {
    2: (
        "contract 2 gives tools ToolContext.store, whose run(fn) calls fn(db) on the store's "
        "own thread, in place of the raw ToolContext.database: move each table access into "
        "`await context.store.run(fn)` and return 2 from contract_version()"
    ),
    3: (
        "contract 3 passes each tool handler the call it serves: write handlers as `async def "
        "handler(arguments, call)`, take the call's id, name and ToolContext from `call` in "
        "place of current_tool_call() (which is gone), and return 3 from contract_version()"
    ),
}
"""What changed in each version, for the sentence that refuses a plugin written for an older
one."""

PROJECT_NAME = "looping"
ENTRY_POINT_GROUP = "looping.plugins"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -- identity ---------------------------------------------------------------------------------


@hookspec
def contract_version() -> int:
    """Return the `CONTRACT_VERSION` this plugin was written against. Required.

    Fires first, once per plugin at startup, before any other hook of that plugin. A mismatch in
    either direction is a startup problem and no other hook of the plugin is called. Sync only.
    """


@hookspec
def plugin_info() -> PluginInfo:
    """Return the plugin's `PluginInfo`: capability sentence, config type, required secrets.

    Required. Fires once per plugin at startup, after the contract version matched and before
    its config is structured. Sync only.
    """


# -- contributions ----------------------------------------------------------------------------


@hookspec
def tool_families(config: Any) -> Sequence[ToolFamily]:
    """Return the tool families this plugin contributes (names unique across plugins).

    `config` is this plugin's structured config (an instance of `PluginInfo.config_type`, or
    `None`). Fires once at startup after config validation. Sync only.
    """


@hookspec
def subtask_types(config: Any) -> Sequence[SubtaskType]:
    """Return the subtask types this plugin contributes (keys unique across plugins).

    Fires once at startup after config validation. Sync only.
    """


@hookspec
def stores(config: Any) -> Sequence[PluginStore]:
    """Return the plugin-owned stores (one per `plugin`, table names unique across plugins).

    Fires once at startup after config validation; `ensure_tables` itself runs later, when the
    store is opened. Sync only.
    """


@hookspec
def workspace_backing(config: Any) -> WorkspaceBacking | None:
    """Return the workspace backing this plugin provides, or `None`.

    At most one selected plugin may return one. Fires once at startup. Sync only.
    """


@hookspec
def model_providers(config: Any) -> Sequence[ModelProvider]:
    """Return named chat-model factories (names unique across plugins).

    Fires once at startup after config validation. Sync only.
    """


# -- runtime ----------------------------------------------------------------------------------


@hookspec
def should_handle_turn(history: Sequence[Any], turn: Turn, config: Any) -> bool | Awaitable[bool]:
    """Say whether the agent should handle `turn`, given the session's `history` so far.

    Fires for every turn, before the agent runs. The answers of all plugins are AND-ed; a gate
    that raises or returns a non-bool is logged and counts as `True` (gates fail open). May be
    `async def`.
    """


@hookspec
def messages_displaced(
    messages: Sequence[Any], session: SessionRef, config: Any
) -> Awaitable[None] | None:
    """Be told that `messages` left `session`'s working context (compacted or truncated).

    Fan-out, best effort: every plugin is called even if another raises; a failure is logged and
    never aborts compaction. The return value is ignored. May be `async def`.
    """
