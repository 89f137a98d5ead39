"""Loading the selected plugins and validating them, all problems at once, before anything listens.

The steps for each selected key, in `[plugins] enabled` order:

1. find its entry point (not installed, or installed by two distributions, is a problem);
2. import it (a failure is a problem that keeps the cause);
3. check its hook implementations against the specs (unknown hook, unknown argument, wrapper);
4. ask its contract version (a mismatch stops here: nothing else of the plugin is called);
5. ask its `PluginInfo`, structure `[plugins.<key>]` into its config type, resolve its secrets;
6. collect its contributions.

Then contributions are checked across plugins (duplicate names, clashing tables, more than one
workspace backing). Unselected plugins are never imported.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import pluggy

import looping_core
from looping_core import hookspecs
from looping_core.config import Config, structure_plugin_config
from looping_core.contract import (
    ModelProvider,
    PluginInfo,
    PluginStore,
    SecretRef,
    SubtaskType,
    ToolFamily,
    WorkspaceBacking,
)
from looping_core.errors import PluginProblem, PluginProblems
from looping_core.plugins._calls import (
    call_one,
    declared_hooks,
    implementations,
    make_plugin_manager,
)
from looping_core.plugins._discovery import InstalledPlugin, closest_key, discover_plugins
from looping_core.plugins._registry import Contribution, LoadedPlugin, PluginRegistry, Provenance

_Item = TypeVar("_Item")

_CONTRIBUTION_HOOKS = (
    "tool_families",
    "subtask_types",
    "stores",
    "workspace_backing",
    "model_providers",
)


@attrs.define
class _Collector:
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


def load_plugins(
    config: Config,
    environ: Mapping[str, str] | None = None,
    installed: Sequence[InstalledPlugin] | None = None,
) -> tuple[PluginRegistry, pluggy.PluginManager]:
    """Load and validate the plugins `config` selects.

    Returns the registry and the plugin manager the host facade calls through. Raises
    `PluginProblems` listing every problem found. `installed` defaults to what is discovered
    through the `looping.plugins` entry points.
    """
    env = os.environ if environ is None else environ
    available = list(discover_plugins() if installed is None else installed)
    problems = _Collector()
    pm = make_plugin_manager()
    loaded: list[LoadedPlugin] = []

    for key in config.plugins.enabled:
        candidate = _find(key, available, problems)
        if candidate is None:
            continue
        source = Provenance(candidate.key, candidate.distribution, candidate.version)
        plugin = _load_one(candidate, source, config=config, environ=env, pm=pm, problems=problems)
        if plugin is not None:
            loaded.append(plugin)

    registry = _collect_contributions(loaded, pm, problems)
    if problems.problems:
        raise PluginProblems(problems.problems)
    return registry, pm


def _find(
    key: str, available: Sequence[InstalledPlugin], problems: _Collector
) -> InstalledPlugin | None:
    matches = [plugin for plugin in available if plugin.key == key]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        keys = sorted({plugin.key for plugin in available})
        suggestion = closest_key(key, keys)
        hint = f" Did you mean {suggestion!r}?" if suggestion else ""
        listing = ", ".join(keys) if keys else "none"
        problems.add(
            "not-installed",
            f"is selected in plugins.enabled but no installed distribution provides it "
            f"(installed plugins: {listing}).{hint} Install the distribution that provides it, "
            f"or fix the key.",
            plugin=key,
        )
        return None
    providers = ", ".join(f"{p.distribution} {p.version} ({p.value})" for p in matches)
    problems.add(
        "duplicate-key",
        f"is provided by {len(matches)} distributions: {providers}. A key must come from one "
        f"distribution; uninstall all but one of them.",
        plugin=key,
    )
    return None


def _load_one(
    candidate: InstalledPlugin,
    source: Provenance,
    *,
    config: Config,
    environ: Mapping[str, str],
    pm: pluggy.PluginManager,
    problems: _Collector,
) -> LoadedPlugin | None:
    try:
        obj = candidate.load()
    except Exception as exc:
        problems.add(
            "import-failed",
            f"failed to import {candidate.value!r}: {type(exc).__name__}: {exc}. Fix the "
            f"plugin's installation (its dependencies) or remove it from plugins.enabled.",
            source,
            cause=exc,
        )
        return None

    before = len(problems.problems)
    hooks = _check_hookimpls(obj, pm, source, problems)
    if len(problems.problems) > before:
        return None
    pm.register(obj, name=source.plugin)

    if not _check_contract_version(pm, source, problems):
        pm.unregister(name=source.plugin)
        return None
    info = _plugin_info(pm, source, problems)
    if info is None:
        pm.unregister(name=source.plugin)
        return None
    plugin_config = _plugin_config(info, config, source, problems)
    if plugin_config is _INVALID:
        pm.unregister(name=source.plugin)
        return None
    _check_secrets(info, plugin_config, environ, source, problems)
    return LoadedPlugin(source=source, obj=obj, info=info, config=plugin_config, hooks=hooks)


def _check_hookimpls(
    obj: object, pm: pluggy.PluginManager, source: Provenance, problems: _Collector
) -> tuple[str, ...]:
    """Refuse hook implementations that have no spec or declare arguments the spec lacks."""
    specs = _spec_arguments()
    hooks = declared_hooks(pm, obj)
    for hook, attribute in hooks.items():
        opts = pm.parse_hookimpl_opts(obj, attribute)
        if hook not in specs:
            suggestion = closest_key(hook, specs)
            hint = f" Did you mean {suggestion!r}?" if suggestion else ""
            problems.add(
                "unknown-hook",
                f"implements hook {hook!r}, which contract version {hookspecs.CONTRACT_VERSION} "
                f"does not define.{hint} Rename or remove it; the hooks are listed in "
                f"docs/plugin-hooks.md.",
                source,
            )
            continue
        if opts and (opts.get("wrapper") or opts.get("hookwrapper")):
            problems.add(
                "unsupported-hookimpl",
                f"implements {hook!r} as a wrapper; looping calls each plugin's hooks on their "
                f"own, so wrappers are not supported. Remove wrapper=True/hookwrapper=True.",
                source,
            )
            continue
        declared = _argument_names(getattr(obj, attribute))
        extra = [name for name in declared if name not in specs[hook]]
        if extra:
            problems.add(
                "unknown-hook-argument",
                f"implements {hook!r} with argument(s) {', '.join(extra)} that the hook does "
                f"not pass; it passes only ({', '.join(specs[hook])}). Remove the extra "
                f"arguments.",
                source,
            )
    return tuple(sorted(hooks))


def _spec_arguments() -> dict[str, tuple[str, ...]]:
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return {
        name: _argument_names(getattr(hookspecs, name))
        for name in hookspecs.__all__
        if hasattr(getattr(hookspecs, name), marker)
    }


def _argument_names(function: Callable[..., object]) -> tuple[str, ...]:
    parameters = inspect.signature(function).parameters.values()
    return tuple(p.name for p in parameters if p.default is inspect.Parameter.empty)


def _raised(hook: str, exc: Exception) -> str:
    return (
        f"{hook}() raised {type(exc).__name__}: {exc}. Fix the plugin, or remove it from "
        "plugins.enabled."
    )


_INVALID = object()
"""Stands for "this step failed and its problem is recorded"."""


def _call_required(
    pm: pluggy.PluginManager,
    hook: str,
    source: Provenance,
    problems: _Collector,
    *,
    missing: tuple[str, str],
) -> Any:
    """Call a required, argument-less identity hook; `_INVALID` if it is missing or raises."""
    impl = implementations(pm, hook).get(source.plugin)
    if impl is None:
        problems.add(*missing, source)
        return _INVALID
    try:
        return call_one(impl, {})
    except Exception as exc:
        problems.add("hook-failed", _raised(hook, exc), source, cause=exc)
        return _INVALID


def _check_contract_version(
    pm: pluggy.PluginManager, source: Provenance, problems: _Collector
) -> bool:
    fix = (
        "implement `contract_version()` returning looping_core.hookspecs.CONTRACT_VERSION "
        f"({hookspecs.CONTRACT_VERSION})."
    )
    version = _call_required(
        pm, "contract_version", source, problems,
        missing=("missing-contract-version", f"does not declare its contract version; {fix}"),
    )  # fmt: skip
    if version is _INVALID:
        return False
    if isinstance(version, bool) or not isinstance(version, int):
        problems.add(
            "contract-version",
            f"contract_version() returned {type(version).__name__}, not an int; {fix}",
            source,
        )
        return False
    if version == hookspecs.CONTRACT_VERSION:
        return True
    core = f"looping-core {looping_core.__version__}"
    if version > hookspecs.CONTRACT_VERSION:
        fix = f"upgrade looping-core to a release that speaks contract version {version}"
    else:
        fix = (
            f"upgrade {source.distribution} to a release written for contract version "
            f"{hookspecs.CONTRACT_VERSION}, or pin looping-core to a release that speaks "
            f"contract version {version}"
        )
        changes = [
            hookspecs.CONTRACT_CHANGES[step]
            for step in range(version + 1, hookspecs.CONTRACT_VERSION + 1)
            if step in hookspecs.CONTRACT_CHANGES
        ]
        if changes:  # what its author changes, spelled out
            fix += "; to port it: " + "; ".join(changes)
    problems.add(
        "contract-version",
        f"targets plugin contract version {version}, but {core} speaks contract version "
        f"{hookspecs.CONTRACT_VERSION}; {fix}.",
        source,
    )
    return False


def _plugin_info(
    pm: pluggy.PluginManager, source: Provenance, problems: _Collector
) -> PluginInfo | None:
    info = _call_required(
        pm, "plugin_info", source, problems,
        missing=(
            "missing-plugin-info",
            "does not implement `plugin_info()`; return a looping_core.contract.PluginInfo "
            "with its capability sentence.",
        ),
    )  # fmt: skip
    if info is _INVALID:
        return None
    if not isinstance(info, PluginInfo):
        problems.add(
            "bad-contribution",
            f"plugin_info() returned {type(info).__name__}; return a "
            "looping_core.contract.PluginInfo.",
            source,
        )
        return None
    if info.config_type is not None and not attrs.has(info.config_type):
        problems.add(
            "bad-contribution",
            f"PluginInfo.config_type {info.config_type!r} is not an attrs class; decorate it "
            "with @attrs.frozen.",
            source,
        )
        return None
    fields = {f.name: f for f in attrs.fields(info.config_type)} if info.config_type else {}
    for name in info.secrets:
        if name not in fields:
            problems.add(
                "bad-contribution",
                f"PluginInfo.secrets names {name!r}, which is not a field of its config type; "
                "list the names of SecretRef fields.",
                source,
            )
            return None
    return info


def _plugin_config(
    info: PluginInfo, config: Config, source: Provenance, problems: _Collector
) -> Any:
    raw = config.plugins.settings.get(source.plugin, {})
    value, errors = structure_plugin_config(raw, info.config_type, f"$.plugins.{source.plugin}")
    for error in errors:
        problems.add(
            "config-invalid",
            f"invalid settings in {config.source}: {error}",
            source,
        )
    return _INVALID if errors else value


def _check_secrets(
    info: PluginInfo,
    plugin_config: Any,
    environ: Mapping[str, str],
    source: Provenance,
    problems: _Collector,
) -> None:
    for name in info.secrets:
        ref = getattr(plugin_config, name, None)
        where = f"plugins.{source.plugin}.{name}"
        if not isinstance(ref, SecretRef):
            problems.add(
                "missing-secret",
                f'requires the secret {where}; add `{name} = "env:VARIABLE"` to '
                f"[plugins.{source.plugin}] and set that environment variable.",
                source,
            )
        elif not ref.is_set(environ):
            problems.add(
                "missing-secret",
                f"requires the secret {where}, read from the environment variable {ref.env}, "
                f"which is not set; export {ref.env} before starting.",
                source,
            )


def _collect_contributions(
    loaded: Sequence[LoadedPlugin], pm: pluggy.PluginManager, problems: _Collector
) -> PluginRegistry:
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
            except Exception as exc:
                problems.add(
                    "hook-failed",
                    _raised(hook, exc),
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
    problems: _Collector,
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


def _check_tables(stores: Sequence[Contribution[PluginStore]], problems: _Collector) -> None:
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
    contributions: Sequence[Contribution[WorkspaceBacking]], problems: _Collector
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
