"""`PluginHost`: the typed facade the rest of the host calls plugins through."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pluggy

from looping_core.config import Config
from looping_core.contract import SessionRef, Turn
from looping_core.plugins._calls import call_one, call_one_async, implementations
from looping_core.plugins._loader import load_plugins
from looping_core.plugins._registry import LoadedPlugin, PluginRegistry

_log = logging.getLogger("looping_core.plugins")

DISPLACED_TIMEOUT_SECONDS = 10.0
"""How long one `messages_displaced` listener may take before compaction goes on without it."""


class PluginHost:
    """The selected, validated plugins: their contributions and one method per runtime hook.

    Identity and contribution hooks are called once, by `PluginHost.load`; their results live in
    `registry`. Runtime hooks are called through `should_handle_turn` and `messages_displaced`.
    """

    def __init__(self, registry: PluginRegistry, pm: pluggy.PluginManager) -> None:
        self.registry = registry
        self._pm = pm

    @classmethod
    def load(cls, config: Config, environ: Mapping[str, str] | None = None) -> PluginHost:
        """Load and validate the plugins `config` selects; raises `PluginProblems`."""
        registry, pm = load_plugins(config, environ)
        return cls(registry, pm)

    def for_plugins(self, keys: Collection[str]) -> PluginHost:
        """The host as a tenant with this plugin subset sees it."""
        return PluginHost(self.registry.for_plugins(keys), self._pm)

    async def should_handle_turn(self, history: Sequence[Any], turn: Turn) -> bool:
        """AND of every gate; a gate that raises or answers a non-bool counts as `True`."""
        handle = True
        for plugin, impl in self._impls("should_handle_turn"):
            try:
                verdict = await call_one_async(
                    impl, {"history": history, "turn": turn, "config": plugin.config}
                )
            except Exception:
                _log.exception("%s: should_handle_turn raised; failing open", plugin.source)
                continue
            if not isinstance(verdict, bool):
                _log.warning(
                    "%s: should_handle_turn returned %s, not a bool; failing open",
                    plugin.source,
                    type(verdict).__name__,
                )
                continue
            # Every gate is asked even after a "no", so each sees every turn.
            handle = handle and verdict
        return handle

    async def messages_displaced(
        self,
        messages: Sequence[Any],
        session: SessionRef,
        *,
        timeout: float = DISPLACED_TIMEOUT_SECONDS,
    ) -> None:
        """Tell every listener at once, each bounded by `timeout` seconds; one that raises or
        hangs is logged and costs no other listener its call. A synchronous listener runs on a
        thread, so even one that blocks cannot hold compaction up (the thread is left to finish).
        """
        impls = self._impls("messages_displaced")
        if impls:
            await asyncio.gather(
                *(self._tell(plugin, impl, messages, session, timeout) for plugin, impl in impls)
            )

    @staticmethod
    async def _tell(
        plugin: LoadedPlugin,
        impl: pluggy.HookImpl,
        messages: Sequence[Any],
        session: SessionRef,
        timeout: float,
    ) -> None:
        arguments = {"messages": messages, "session": session, "config": plugin.config}
        try:
            async with asyncio.timeout(timeout):
                if inspect.iscoroutinefunction(impl.function):
                    await call_one_async(impl, arguments)
                else:
                    result = await asyncio.to_thread(call_one, impl, arguments)
                    if inspect.isawaitable(result):
                        await result
        except TimeoutError:
            _log.error(
                "%s: messages_displaced did not return within %g s; compaction went on without it",
                plugin.source,
                timeout,
            )
        except Exception:
            _log.exception("%s: messages_displaced raised; ignored", plugin.source)

    async def aclose(self) -> None:
        """Release what the tool families hold open (`ToolFamily.aclose`), each once; one that
        raises is logged and the others still run."""
        for name, contribution in self.registry.tool_families.items():
            close = contribution.item.aclose
            if close is None:
                continue
            try:
                await close()
            except Exception:
                _log.exception("%s: tool family %r failed to close", contribution.source, name)

    def _impls(self, hook: str) -> list[tuple[LoadedPlugin, pluggy.HookImpl]]:
        impls = implementations(self._pm, hook)
        return [(p, impls[p.key]) for p in self.registry.plugins if p.key in impls]
