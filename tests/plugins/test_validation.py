"""Startup validation against real distributions installed with pip (tests/plugin_dists/)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from looping_core.config import Config, PluginsConfig
from looping_core.errors import PluginProblem, PluginProblems
from looping_core.plugins import PluginRegistry, load_plugins

pytestmark = pytest.mark.usefixtures("installed_test_plugins")

CORE = metadata.version("looping-core")


def load(
    *keys: str,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> PluginRegistry:
    config = Config(
        source="test.toml",
        plugins=PluginsConfig(enabled=keys, settings=dict(settings or {})),
    )
    registry, _ = load_plugins(config, environ or {})
    return registry


def problems_of(*keys: str, **kwargs: Any) -> list[PluginProblem]:
    with pytest.raises(PluginProblems) as caught:
        load(*keys, **kwargs)
    return list(caught.value.problems)


def messages_of(*keys: str, **kwargs: Any) -> list[str]:
    return [problem.message for problem in problems_of(*keys, **kwargs)]


def test_a_valid_plugin_loads_with_provenance() -> None:
    registry = load("good")
    family = registry.tool_families["good-tools"]
    assert family.source.plugin == "good"
    assert (family.source.distribution, family.source.version) == ("lpt-good", "1.0.0")
    assert registry.subtask_types["good-subtask"].source.plugin == "good"
    assert registry.stores["good"].item.tables == ("good_items",)
    assert registry.model_providers["good-models"].source.distribution == "lpt-good"
    assert registry.keys == ("good",)


def test_contract_version_newer_than_core() -> None:
    assert messages_of("future") == [
        f"plugin 'future' (lpt-bad 2.0.0): targets plugin contract version 4, but looping-core "
        f"{CORE} speaks contract version 3; upgrade looping-core to a release that speaks "
        "contract version 4."
    ]


CONTRACT_3 = (
    "contract 3 passes each tool handler the call it serves: write handlers as `async def "
    "handler(arguments, call)`, take the call's id, name and ToolContext from `call` in place "
    "of current_tool_call() (which is gone), and return 3 from contract_version()."
)


def test_a_plugin_written_for_contract_2_is_told_how_to_port_it() -> None:
    assert messages_of("two") == [
        f"plugin 'two' (lpt-bad 2.0.0): targets plugin contract version 2, but looping-core "
        f"{CORE} speaks contract version 3; upgrade lpt-bad to a release written for contract "
        "version 3, or pin looping-core to a release that speaks contract version 2; to port "
        f"it: {CONTRACT_3}"
    ]


def test_a_plugin_written_for_contract_1_is_told_every_change() -> None:
    assert messages_of("past") == [
        f"plugin 'past' (lpt-bad 2.0.0): targets plugin contract version 1, but looping-core "
        f"{CORE} speaks contract version 3; upgrade lpt-bad to a release written for contract "
        "version 3, or pin looping-core to a release that speaks contract version 1; to port "
        "it: contract 2 gives tools ToolContext.store, whose run(fn) calls fn(db) on the "
        "store's own thread, in place of the raw ToolContext.database: move each table access "
        f"into `await context.store.run(fn)` and return 2 from contract_version(); {CONTRACT_3}"
    ]


def test_a_plugin_with_the_wrong_contract_gets_no_other_hook_called() -> None:
    # `future` contributes a tool family whose hook raises AssertionError if called.
    [problem] = problems_of("future")
    assert problem.code == "contract-version"


def test_selected_but_not_installed_lists_installed_and_suggests() -> None:
    [problem] = problems_of("god")
    assert problem.code == "not-installed"
    assert problem.message.startswith(
        "plugin 'god': is selected in plugins.enabled but no installed distribution provides it "
        "(installed plugins: broken, dup-family, "
    )
    assert problem.message.endswith(
        "ws-a, ws-b). Did you mean 'good'? Install the distribution that provides it, or fix "
        "the key."
    )


def test_same_key_from_two_distributions() -> None:
    assert messages_of("twin") == [
        "plugin 'twin': is provided by 2 distributions: lpt-twin-a 1.0.0 (lpt_twin_a), "
        "lpt-twin-b 1.1.0 (lpt_twin_b). A key must come from one distribution; uninstall all "
        "but one of them."
    ]


def test_duplicate_tool_family_and_model_provider_name_both_plugins() -> None:
    assert messages_of("good", "dup-family") == [
        "plugin 'good' (lpt-good 1.0.0): contributes the tool family 'good-tools', which plugin "
        "'dup-family' (lpt-bad 2.0.0) contributes too; tool family names must be unique across "
        "selected plugins. Rename one, or select only one of these plugins.",
        "plugin 'dup-family' (lpt-bad 2.0.0): contributes the tool family 'good-tools', which "
        "plugin 'good' (lpt-good 1.0.0) contributes too; tool family names must be unique across "
        "selected plugins. Rename one, or select only one of these plugins.",
        "plugin 'good' (lpt-good 1.0.0): contributes the model provider 'good-models', which "
        "plugin 'dup-family' (lpt-bad 2.0.0) contributes too; model provider names must be unique "
        "across selected plugins. Rename one, or select only one of these plugins.",
        "plugin 'dup-family' (lpt-bad 2.0.0): contributes the model provider 'good-models', which "
        "plugin 'good' (lpt-good 1.0.0) contributes too; model provider names must be unique "
        "across selected plugins. Rename one, or select only one of these plugins.",
    ]


def test_duplicate_subtask_type() -> None:
    problems = problems_of("good", "dup-subtask")
    assert [(p.code, p.plugin) for p in problems] == [
        ("duplicate-subtask-type", "good"),
        ("duplicate-subtask-type", "dup-subtask"),
    ]
    assert "subtask type 'good-subtask'" in problems[1].message


def test_duplicate_store() -> None:
    problems = problems_of("good", "dup-store")
    assert [(p.code, p.plugin) for p in problems] == [
        ("duplicate-store", "good"),
        ("duplicate-store", "dup-store"),
    ]


def test_clashing_table_names_ignore_case() -> None:
    assert messages_of("good", "table-clash") == [
        "plugin 'good' (lpt-good 1.0.0): its store declares table 'good_items', which is also "
        "declared by plugin 'table-clash' (lpt-bad 2.0.0); prefix plugin tables with the "
        "plugin's own name.",
        "plugin 'table-clash' (lpt-bad 2.0.0): its store declares table 'good_items', which is "
        "also declared by plugin 'good' (lpt-good 1.0.0); prefix plugin tables with the "
        "plugin's own name.",
    ]


def test_unknown_hook_suggests_the_spec() -> None:
    assert messages_of("unknown-hook") == [
        "plugin 'unknown-hook' (lpt-bad 2.0.0): implements hook 'tool_familys', which contract "
        "version 3 does not define. Did you mean 'tool_families'? Rename or remove it; the hooks "
        "are listed in docs/plugin-hooks.md."
    ]


def test_hook_argument_the_spec_lacks() -> None:
    assert messages_of("extra-arg") == [
        "plugin 'extra-arg' (lpt-bad 2.0.0): implements 'tool_families' with argument(s) tenant "
        "that the hook does not pass; it passes only (config). Remove the extra arguments."
    ]


def test_required_secret_not_configured() -> None:
    assert messages_of("needs-secret") == [
        "plugin 'needs-secret' (lpt-bad 2.0.0): requires the secret "
        'plugins.needs-secret.api_key; add `api_key = "env:VARIABLE"` to [plugins.needs-secret] '
        "and set that environment variable."
    ]


def test_required_secret_whose_variable_is_unset_names_the_variable() -> None:
    settings = {"needs-secret": {"api_key": "env:LPT_API_KEY"}}
    assert messages_of("needs-secret", settings=settings, environ={"OTHER": "x"}) == [
        "plugin 'needs-secret' (lpt-bad 2.0.0): requires the secret "
        "plugins.needs-secret.api_key, read from the environment variable LPT_API_KEY, which is "
        "not set; export LPT_API_KEY before starting."
    ]


def test_required_secret_present_loads_and_is_never_in_the_config_repr() -> None:
    settings = {"needs-secret": {"api_key": "env:LPT_API_KEY"}}
    registry = load("needs-secret", settings=settings, environ={"LPT_API_KEY": "s3cr3t-value"})
    plugin = registry.plugin("needs-secret")
    assert plugin.config.api_key.value({"LPT_API_KEY": "s3cr3t-value"}) == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(registry)


def test_an_inline_secret_is_refused_without_echoing_it() -> None:
    settings = {"needs-secret": {"api_key": "sk-inline-value"}}
    [problem] = problems_of("needs-secret", settings=settings)
    assert problem.code == "config-invalid"
    assert problem.message == (
        "plugin 'needs-secret' (lpt-bad 2.0.0): invalid settings in test.toml: secrets are given "
        'by indirection as "env:NAME" (the name of an environment variable), never inline '
        "@ $.plugins.needs-secret.api_key"
    )
    assert "sk-inline-value" not in problem.message


def test_plugin_settings_are_structured_strictly() -> None:
    settings = {"needs-secret": {"api_key": "env:K", "region": 3, "regoin": "eu"}}
    assert [
        p.message.split(": ", 2)[-1] for p in problems_of("needs-secret", settings=settings)
    ] == [
        "expected a string, got integer @ $.plugins.needs-secret.region",
        "extra fields found (regoin: did you mean region?) @ $.plugins.needs-secret",
    ]


def test_a_plugin_without_config_type_refuses_settings() -> None:
    [problem] = problems_of("good", settings={"good": {"x": 1}})
    assert problem.message.endswith("this plugin takes no settings, found (x) @ $.plugins.good")


def test_import_failure_keeps_the_cause() -> None:
    [problem] = problems_of("broken")
    assert problem.message == (
        "plugin 'broken' (lpt-broken 0.3.0): failed to import 'lpt_broken': "
        "ModuleNotFoundError: No module named 'lpt_missing_dependency'. Fix the plugin's "
        "installation (its dependencies) or remove it from plugins.enabled."
    )
    assert isinstance(problem.cause, ModuleNotFoundError)


def test_two_workspace_backings() -> None:
    assert messages_of("ws-a", "ws-b") == [
        "plugin 'ws-a' (lpt-bad 2.0.0): provides workspace backing 'disk', but so does plugin "
        "'ws-b' (lpt-bad 2.0.0); at most one selected plugin may provide it. Select only one of "
        "them.",
        "plugin 'ws-b' (lpt-bad 2.0.0): provides workspace backing 'bucket', but so does plugin "
        "'ws-a' (lpt-bad 2.0.0); at most one selected plugin may provide it. Select only one of "
        "them.",
    ]


def test_one_workspace_backing_is_fine() -> None:
    backing = load("ws-a").workspace_backing
    assert backing is not None
    assert (backing.item.name, backing.source.plugin) == ("disk", "ws-a")


def test_every_problem_is_reported_together() -> None:
    problems = problems_of(
        "good", "future", "past", "twin", "dup-family", "unknown-hook", "extra-arg",
        "needs-secret", "broken", "ws-a", "ws-b", "nope",
    )  # fmt: skip
    assert [(p.code, p.plugin) for p in problems] == [
        ("contract-version", "future"),
        ("contract-version", "past"),
        ("duplicate-key", "twin"),
        ("unknown-hook", "unknown-hook"),
        ("unknown-hook-argument", "extra-arg"),
        ("missing-secret", "needs-secret"),
        ("import-failed", "broken"),
        ("not-installed", "nope"),
        ("duplicate-tool-family", "good"),
        ("duplicate-tool-family", "dup-family"),
        ("duplicate-model-provider", "good"),
        ("duplicate-model-provider", "dup-family"),
        ("multiple-workspace-backings", "ws-a"),
        ("multiple-workspace-backings", "ws-b"),
    ]
    error = PluginProblems(problems)
    assert str(error).startswith("14 plugin problems:\n  - plugin 'future' (lpt-bad 2.0.0): ")


def test_unselected_plugins_are_not_imported(plugin_site: Path) -> None:
    for module in ("lpt_broken", "lpt_twin_a", "lpt_bad.future"):
        sys.modules.pop(module, None)
    load("good")
    assert "lpt_broken" not in sys.modules
    assert "lpt_twin_a" not in sys.modules
    assert "lpt_bad.future" not in sys.modules


def test_contract_version_is_required() -> None:
    assert messages_of("no-version") == [
        "plugin 'no-version' (lpt-bad 2.0.0): does not declare its contract version; implement "
        "`contract_version()` returning looping_core.hookspecs.CONTRACT_VERSION (3)."
    ]


def test_contribution_hooks_that_raise_or_return_the_wrong_type() -> None:
    problems = problems_of("misbehaving")
    assert [(p.code, p.message) for p in problems] == [
        (
            "bad-contribution",
            "plugin 'misbehaving' (lpt-bad 2.0.0): tool_families() must return a list of "
            "ToolFamily, got dict.",
        ),
        (
            "hook-failed",
            "plugin 'misbehaving' (lpt-bad 2.0.0): subtask_types() raised RuntimeError: "
            "database unavailable. Fix the plugin, or remove it from plugins.enabled.",
        ),
    ]
    assert isinstance(problems[1].cause, RuntimeError)
