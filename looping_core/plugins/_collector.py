"""The problems of loading plugins, gathered so that every one is reported at once."""

from __future__ import annotations

import attrs

from looping_core.errors import PluginProblem
from looping_core.plugins._registry import Provenance

__all__ = ["Collector", "raised"]


@attrs.define
class Collector:
    """Gathers problems; each sentence starts with whose problem it is."""

    problems: list[PluginProblem] = attrs.field(factory=list)

    def add(
        self,
        code: str,
        message: str,
        source: Provenance | None = None,
        *,
        plugin: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        if source is not None:
            message = f"{source}: {message}"
            plugin = source.plugin
        elif plugin is not None:
            message = f"plugin {plugin!r}: {message}"
        self.problems.append(
            PluginProblem(
                code=code,
                message=message,
                plugin=plugin,
                distribution=source.distribution if source else None,
                version=source.version if source else None,
                cause=cause,
            )
        )


def raised(hook: str, exc: Exception) -> str:
    return (
        f"{hook}() raised {type(exc).__name__}: {exc}. Fix the plugin, or remove it from "
        "plugins.enabled."
    )
