"""Import hygiene: a tiny top-level package, and a harness that runtime code never imports."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import looping_core

RUNTIME_MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(looping_core.__path__, "looping_core.")
    if not info.name.startswith("looping_core.testing")
)

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def modules_after_importing(*names: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *names], capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout))


def test_the_walk_finds_the_runtime_modules() -> None:
    assert "looping_core.cli" in RUNTIME_MODULES
    assert "looping_core.plugins._loader" in RUNTIME_MODULES


def test_runtime_code_never_imports_the_test_harness() -> None:
    loaded = modules_after_importing(*RUNTIME_MODULES)
    assert "looping_core.cli" in loaded  # the probe really imported them
    assert not {m for m in loaded if m.startswith("looping_core.testing")}
    assert "pytest" not in loaded


def test_importing_the_package_stays_tiny() -> None:
    loaded = modules_after_importing("looping_core")
    assert not loaded & {"aiohttp", "peewee", "pluggy", "cattrs", "click"}


def test_the_contract_types_do_not_drag_in_the_host() -> None:
    loaded = modules_after_importing("looping_core.contract", "looping_core.hookspecs")
    assert not loaded & {"peewee", "cattrs", "click", "looping_core.plugins", "looping_core.config"}


def _third_party(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules} - set(sys.stdlib_module_names)


def test_the_harness_pulls_in_nothing_the_runtime_does_not() -> None:
    """`looping_core.testing` (but its pytest plugin, which needs pytest) adds no third-party
    package to what the runtime already imports: an agent's tests run on its dependencies."""
    runtime = _third_party(modules_after_importing(*RUNTIME_MODULES))
    harness = _third_party(modules_after_importing(*RUNTIME_MODULES, "looping_core.testing"))
    assert harness - runtime == set()


def test_an_agent_that_never_delegates_imports_no_delegation() -> None:
    loaded = modules_after_importing("looping_core.agent", "looping_core.runner")
    assert "looping_core.runner" in loaded
    assert not {m for m in loaded if m.startswith("looping_core.delegation")}


def test_metrics_and_traces_cost_no_import_until_used() -> None:
    """prometheus-client and OpenTelemetry are optional extras: the whole server imports
    neither until metrics are enabled or a span is made. (The built-in `mcp` plugin is left
    out: the MCP SDK brings OpenTelemetry's API along, and the plugin is imported only when a
    config selects it, which tests/mcp checks.)"""
    server = [m for m in RUNTIME_MODULES if not m.startswith("looping_core.mcp")]
    loaded = modules_after_importing(*server)
    assert "looping_core._metrics" in loaded
    assert "looping_core._tracing" in loaded
    assert not {m for m in loaded if m.startswith(("prometheus_client", "opentelemetry"))}
