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
from pathlib import Path
from typing import Any

import attrs
import pluggy

import looping_core
from looping_core import hookspecs
from looping_core.config import Config, structure_plugin_config
from looping_core.contract import (
    PluginInfo,
    SecretRef,
)
from looping_core.errors import PluginProblems
from looping_core.plugins._calls import (
    call_one,
    declared_hooks,
    implementations,
    make_plugin_manager,
)
from looping_core.plugins._collector import Collector, raised
from looping_core.plugins._contributions import collect_contributions
from looping_core.plugins._discovery import InstalledPlugin, closest_key, discover_plugins
from looping_core.plugins._registry import LoadedPlugin, PluginRegistry, Provenance


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
    problems = Collector()
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

    registry = collect_contributions(loaded, pm, problems)
    if problems.problems:
        raise PluginProblems(problems.problems)
    return registry, pm


def _find(
    key: str, available: Sequence[InstalledPlugin], problems: Collector
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
    problems: Collector,
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
    obj: object, pm: pluggy.PluginManager, source: Provenance, problems: Collector
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


_INVALID = object()
"""Stands for "this step failed and its problem is recorded"."""


def _call_required(
    pm: pluggy.PluginManager,
    hook: str,
    source: Provenance,
    problems: Collector,
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
        problems.add("hook-failed", raised(hook, exc), source, cause=exc)
        return _INVALID


def _check_contract_version(
    pm: pluggy.PluginManager, source: Provenance, problems: Collector
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
    pm: pluggy.PluginManager, source: Provenance, problems: Collector
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
    info: PluginInfo, config: Config, source: Provenance, problems: Collector
) -> Any:
    raw = config.plugins.settings.get(source.plugin, {})
    folder = config.source_folder or Path.cwd()
    value, errors = structure_plugin_config(
        raw, info.config_type, f"$.plugins.{source.plugin}", folder
    )
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
    problems: Collector,
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
