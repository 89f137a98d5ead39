"""Finding installed plugins from entry-point metadata, without importing any of them."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from importlib import metadata

import attrs

from looping_core.hookspecs import ENTRY_POINT_GROUP


@attrs.frozen
class InstalledPlugin:
    """One `looping.plugins` entry point: its key, its distribution and what it points at."""

    key: str
    distribution: str
    version: str
    value: str
    """The entry point's target, `module` or `module:attribute`."""
    entry_point: metadata.EntryPoint = attrs.field(repr=False, eq=False)

    def load(self) -> object:
        """Import the plugin object. Only ever called for selected plugins (or by `list`)."""
        return self.entry_point.load()


def discover_plugins(group: str = ENTRY_POINT_GROUP) -> list[InstalledPlugin]:
    """Every installed plugin, sorted by key then distribution. Reads metadata only."""
    found: dict[tuple[str, str], InstalledPlugin] = {}
    for entry_point in metadata.entry_points(group=group):
        dist = entry_point.dist
        name = dist.metadata["Name"] if dist is not None else "<unknown distribution>"
        version = dist.version if dist is not None else "?"
        plugin = InstalledPlugin(
            key=entry_point.name,
            distribution=name,
            version=version,
            value=entry_point.value,
            entry_point=entry_point,
        )
        # The same distribution can be visible twice (e.g. a stale egg-info beside a wheel).
        found.setdefault((plugin.key, plugin.distribution), plugin)
    return sorted(found.values(), key=lambda p: (p.key, p.distribution))


def closest_key(key: str, candidates: Iterable[str]) -> str | None:
    """The installed key most like `key`, for "did you mean" hints."""
    matches = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None
