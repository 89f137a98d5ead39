"""Validating plugins exactly as the host does at startup, for plugin authors' tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from looping_core.config import Config, PluginsConfig
from looping_core.errors import PluginProblem, PluginProblems
from looping_core.plugins import PluginRegistry, load_plugins


def _config(keys: Sequence[str], settings: Mapping[str, Mapping[str, Any]], source: str) -> Config:
    return Config(source=source, plugins=PluginsConfig(enabled=tuple(keys), settings=settings))


def plugin_problems(
    key: str,
    settings: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    together_with: Sequence[str] = (),
) -> list[PluginProblem]:
    """The problems the host would report for plugin `key` (an empty list when it is valid).

    `settings` is its `[plugins.<key>]` table; `environ` stands in for `os.environ` (for
    secrets); `together_with` selects more plugins alongside it, to catch clashes.
    """
    try:
        assert_plugin_valid(key, settings, environ=environ, together_with=together_with)
    except PluginProblems as exc:
        return list(exc.problems)
    return []


def assert_plugin_valid(
    key: str,
    settings: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    together_with: Sequence[str] = (),
) -> PluginRegistry:
    """Load plugin `key` as the host would; return the registry or raise `PluginProblems`."""
    keys = [key, *together_with]
    config = _config(keys, {key: dict(settings or {})}, source=f"<settings for {key}>")
    registry, _ = load_plugins(config, environ=environ if environ is not None else {})
    return registry


@attrs.frozen
class PluginValidator:
    """What the `plugin_validator` fixture gives: the two functions, with a fixed environment."""

    environ: Mapping[str, str] = attrs.field(factory=dict)

    def problems(self, key: str, settings: Mapping[str, Any] | None = None) -> list[PluginProblem]:
        return plugin_problems(key, settings, environ=self.environ)

    def assert_valid(self, key: str, settings: Mapping[str, Any] | None = None) -> PluginRegistry:
        return assert_plugin_valid(key, settings, environ=self.environ)
