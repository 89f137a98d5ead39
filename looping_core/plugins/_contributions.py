"""What the loaded plugins contribute (tool families, subtask types, stores, workspace backings,
model providers), collected and checked across plugins: a name given twice, tables two stores
claim, more than one workspace backing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pluggy

from looping_core.contract import (
    ModelProvider,
    PluginStore,
    SubtaskType,
    ToolFamily,
    WorkspaceBacking,
)
from looping_core.errors import ProblemsError
from looping_core.plugins._calls import call_one, implementations
from looping_core.plugins._collector import Collector, raised
from looping_core.plugins._registry import Contribution, LoadedPlugin, PluginRegistry

__all__ = ["collect_contributions"]

_Item = TypeVar("_Item")

_CONTRIBUTION_HOOKS = (
    "tool_families",
    "subtask_types",
    "stores",
    "workspace_backing",
    "model_providers",
)


def collect_contributions(
    loaded: Sequence[LoadedPlugin], pm: pluggy.PluginManager, problems: Collector
) -> PluginRegistry:
    """Each loaded plugin's contributions (each of the right type), checked across plugins:
    names are unique, tables do not clash, at most one workspace backing."""
    gathered: dict[str, list[Contribution[Any]]] = {hook: [] for hook in _CONTRIBUTION_HOOKS}
    expected: dict[str, type] = {
        "tool_families": ToolFamily,
        "subtask_types": SubtaskType,
        "stores": PluginStore,
        "workspace_backing": WorkspaceBacking,
        "model_providers": ModelProvider,
    }
    for hook in _CONTRIBUTION_HOOKS:
        impls = implementations(pm, hook)
        for plugin in loaded:
            impl = impls.get(plugin.key)
            if impl is None:
                continue
            try:
                result = call_one(impl, {"config": plugin.config})
            except ProblemsError as exc:
                # The plugin's own sentences (a server it cannot reach, a setting it refuses):
                # each is a startup problem as it stands, said in the plugin's name.
                for line in exc.problem_lines():
                    problems.add("plugin-startup", line, plugin.source, cause=exc)
                continue
            except Exception as exc:
                problems.add(
                    "hook-failed",
                    raised(hook, exc),
                    plugin.source,
                    cause=exc,
                )
                continue
            items = [result] if hook == "workspace_backing" else result
            if hook == "workspace_backing" and result is None:
                continue
            if not isinstance(items, list | tuple) or not all(
                isinstance(item, expected[hook]) for item in items
            ):
                problems.add(
                    "bad-contribution",
                    f"{hook}() must return "
                    + (
                        "a WorkspaceBacking or None"
                        if hook == "workspace_backing"
                        else f"a list of {expected[hook].__name__}"
                    )
                    + f", got {type(result).__name__}.",
                    plugin.source,
                )
                continue
            gathered[hook].extend(Contribution(item, plugin.source) for item in items)

    tool_families = _unique(gathered["tool_families"], lambda f: f.name, "tool family", problems)
    subtask_types = _unique(gathered["subtask_types"], lambda s: s.key, "subtask type", problems)
    providers = _unique(gathered["model_providers"], lambda m: m.name, "model provider", problems)
    stores = _unique(gathered["stores"], lambda s: s.plugin, "store", problems)
    _check_tables(gathered["stores"], problems)
    workspace = _single_workspace(gathered["workspace_backing"], problems)
    return PluginRegistry(
        plugins=tuple(loaded),
        tool_families=tool_families,
        subtask_types=subtask_types,
        stores=stores,
        model_providers=providers,
        workspace_backing=workspace,
    )


def _unique(
    contributions: Sequence[Contribution[_Item]],
    name_of: Callable[[_Item], str],
    what: str,
    problems: Collector,
) -> dict[str, Contribution[_Item]]:
    by_name: dict[str, list[Contribution[_Item]]] = {}
    for contribution in contributions:
        by_name.setdefault(name_of(contribution.item), []).append(contribution)
    unique: dict[str, Contribution[_Item]] = {}
    for name, group in by_name.items():
        if len(group) == 1:
            unique[name] = group[0]
            continue
        code = "duplicate-" + what.replace(" ", "-")
        for contribution in group:
            problems.add(
                code,
                f"contributes the {what} {name!r}, which {_others(contribution, group)} "
                f"contributes too; {what} names must be unique across selected plugins. "
                "Rename one, or select only one of these plugins.",
                contribution.source,
            )
    return unique


def _others(contribution: Contribution[Any], group: Sequence[Contribution[Any]]) -> str:
    return ", ".join(str(c.source) for c in group if c is not contribution) or "itself"


def _check_tables(stores: Sequence[Contribution[PluginStore]], problems: Collector) -> None:
    owners: dict[str, list[Contribution[PluginStore]]] = {}
    for contribution in stores:
        for table in contribution.item.tables:
            owners.setdefault(table.lower(), []).append(contribution)
    for table, group in owners.items():
        if len(group) > 1:
            for contribution in group:
                problems.add(
                    "table-clash",
                    f"its store declares table {table!r}, which is also declared by "
                    f"{_others(contribution, group)}; prefix plugin tables with the plugin's "
                    "own name.",
                    contribution.source,
                )


def _single_workspace(
    contributions: Sequence[Contribution[WorkspaceBacking]], problems: Collector
) -> Contribution[WorkspaceBacking] | None:
    if len(contributions) <= 1:
        return contributions[0] if contributions else None
    for contribution in contributions:
        problems.add(
            "multiple-workspace-backings",
            f"provides workspace backing {contribution.item.name!r}, but so does "
            f"{_others(contribution, contributions)}; at most one selected plugin may provide "
            "it. Select only one of them.",
            contribution.source,
        )
    return None
