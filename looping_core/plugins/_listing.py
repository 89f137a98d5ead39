"""What `looping plugins list` shows: every installed plugin, selected or not.

Listing imports each installed plugin to read its contract version and hooks; an import that fails
is shown as that plugin's `error` and never stops the listing. Startup (`PluginHost.load`) imports
only the selected ones.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import attrs

from looping_core.plugins._calls import declared_hooks, make_plugin_manager
from looping_core.plugins._discovery import InstalledPlugin, discover_plugins


@attrs.frozen
class PluginListing:
    """One row of `looping plugins list`; `to_json()` is the shape in contracts/."""

    key: str
    distribution: str
    version: str
    entry_point: str
    selected: bool
    contract_version: int | None = None
    capability: str | None = None
    hooks: tuple[str, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "distribution": self.distribution,
            "version": self.version,
            "entry_point": self.entry_point,
            "selected": self.selected,
            "contract_version": self.contract_version,
            "capability": self.capability,
            "hooks": list(self.hooks),
            "error": self.error,
        }


def list_plugins(
    selected: Collection[str] = (), installed: Collection[InstalledPlugin] | None = None
) -> list[PluginListing]:
    """Describe every installed plugin; `selected` are the keys the config enables."""
    plugins = discover_plugins() if installed is None else installed
    return [_describe(plugin, plugin.key in selected) for plugin in plugins]


def _describe(plugin: InstalledPlugin, selected: bool) -> PluginListing:
    base = PluginListing(
        key=plugin.key,
        distribution=plugin.distribution,
        version=plugin.version,
        entry_point=plugin.value,
        selected=selected,
    )
    try:
        obj = plugin.load()
    except Exception as exc:
        return attrs.evolve(base, error=f"import failed: {type(exc).__name__}: {exc}")
    pm = make_plugin_manager()
    hooks = declared_hooks(pm, obj)
    version = _ask(obj, hooks.get("contract_version"))
    info = _ask(obj, hooks.get("plugin_info"))
    return attrs.evolve(
        base,
        hooks=tuple(hooks),
        contract_version=version if isinstance(version, int) else None,
        capability=getattr(info, "capability", None),
    )


def _ask(obj: object, attribute: str | None) -> object:
    """Call a no-argument identity hook, tolerating plugins that misbehave."""
    if attribute is None:
        return None
    try:
        return getattr(obj, attribute)()
    except Exception:
        return None
