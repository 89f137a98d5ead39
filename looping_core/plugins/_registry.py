"""What the selected plugins contributed, each item with its plugin and distribution."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Generic, TypeVar

import attrs

from looping_core.contract import (
    ModelProvider,
    PluginInfo,
    PluginStore,
    SubtaskType,
    ToolFamily,
    WorkspaceBacking,
)

_Item = TypeVar("_Item")


@attrs.frozen
class Provenance:
    """Which plugin (entry-point key) of which distribution gave something."""

    plugin: str
    distribution: str
    version: str

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} ({self.distribution} {self.version})"


@attrs.frozen
class Contribution(Generic[_Item]):
    """A contributed item and where it came from."""

    item: _Item
    source: Provenance


@attrs.frozen
class LoadedPlugin:
    """A selected plugin that passed validation: its object, identity and structured config."""

    source: Provenance
    obj: object = attrs.field(repr=False)
    info: PluginInfo
    config: Any
    hooks: tuple[str, ...]

    @property
    def key(self) -> str:
        return self.source.plugin


@attrs.frozen
class PluginRegistry:
    """Everything the selected plugins contributed, keyed by name, with provenance.

    Built once at startup by `load_plugins`; read-only afterwards. `for_plugins` gives the view a
    tenant with a plugin subset sees.
    """

    plugins: tuple[LoadedPlugin, ...] = ()
    tool_families: Mapping[str, Contribution[ToolFamily]] = attrs.field(factory=dict)
    subtask_types: Mapping[str, Contribution[SubtaskType]] = attrs.field(factory=dict)
    stores: Mapping[str, Contribution[PluginStore]] = attrs.field(factory=dict)
    model_providers: Mapping[str, Contribution[ModelProvider]] = attrs.field(factory=dict)
    workspace_backing: Contribution[WorkspaceBacking] | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(plugin.key for plugin in self.plugins)

    def plugin(self, key: str) -> LoadedPlugin:
        """The loaded plugin with this key; `KeyError` if it is not selected."""
        for plugin in self.plugins:
            if plugin.key == key:
                return plugin
        raise KeyError(f"plugin {key!r} is not selected (selected: {', '.join(self.keys)})")

    def for_plugins(self, keys: Collection[str]) -> PluginRegistry:
        """The registry restricted to the plugins in `keys` (a tenant's subset).

        The workspace backing is deployment-wide, so it is kept whoever provides it.
        """
        wanted = set(keys)

        def keep(items: Mapping[str, Contribution[_Item]]) -> dict[str, Contribution[_Item]]:
            return {name: c for name, c in items.items() if c.source.plugin in wanted}

        return PluginRegistry(
            plugins=tuple(p for p in self.plugins if p.key in wanted),
            tool_families=keep(self.tool_families),
            subtask_types=keep(self.subtask_types),
            stores=keep(self.stores),
            model_providers=keep(self.model_providers),
            workspace_backing=self.workspace_backing,
        )
