"""Calling one plugin's hook implementation at a time.

pluggy's `pm.hook.<name>(...)` calls every plugin and returns bare results. The host needs to know
which plugin gave which result and to pass each plugin its own config, so it calls
implementations one by one through these helpers; nothing else in the package touches
`pm.hook` directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import pluggy
from pluggy import HookImpl

from looping_core import hookspecs


def make_plugin_manager() -> pluggy.PluginManager:
    """A fresh plugin manager with the contract's hook specs (never a global one)."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def implementations(pm: pluggy.PluginManager, hook: str) -> dict[str, HookImpl]:
    """The implementations of `hook`, by plugin key, in registration order."""
    caller = getattr(pm.hook, hook)
    return {impl.plugin_name: impl for impl in caller.get_hookimpls()}


def call_one(impl: HookImpl, arguments: Mapping[str, Any]) -> Any:
    """Call one implementation with the subset of `arguments` it declares."""
    return impl.function(*(arguments[name] for name in impl.argnames))


async def call_one_async(impl: HookImpl, arguments: Mapping[str, Any]) -> Any:
    """Like `call_one`, awaiting the result when the implementation is `async def`."""
    result = call_one(impl, arguments)
    if inspect.isawaitable(result):
        result = await result
    return result


def declared_hooks(pm: pluggy.PluginManager, obj: object) -> dict[str, str]:
    """The hooks `obj` implements (marked with `hookimpl`), as hook name -> attribute name."""
    hooks: dict[str, str] = {}
    for attribute in sorted(dir(obj)):
        opts = pm.parse_hookimpl_opts(obj, attribute)
        if opts is not None:
            hooks[opts.get("specname") or attribute] = attribute
    return hooks
