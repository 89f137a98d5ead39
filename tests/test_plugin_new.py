"""`looping plugin new`: the written distribution installs, its tests pass as generated, and the
host's `looping check` accepts a config that enables it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from looping_core.plugin_template import CI_PLACEHOLDER, core_source
from looping_core.testing import ed25519_private_jwk

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_a_new_plugin_installs_and_passes_its_own_tests(looping_cli: Cli, tmp_path: Path) -> None:
    made = looping_cli("plugin", "new", "my-tools", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    plugin = tmp_path / "my-tools"
    for part in ("pyproject.toml", "README.md", "looping.toml", "src/my_tools/plugin.py",
                 "tests/test_plugin.py", ".github/workflows/ci.yml"):  # fmt: skip
        assert (plugin / part).is_file(), part
    assert 'dependencies = ["looping-core>=0.1,<0.2"]' in (plugin / "pyproject.toml").read_text()
    # Installed here from a clone, not an index: its commands install this very looping-core.
    core = core_source()
    assert core.path is not None
    install = f"pip install -e '{core.path}' -e '.[test]'"
    assert install in (plugin / "README.md").read_text()
    ci = (plugin / ".github/workflows/ci.yml").read_text()
    assert f"pip install 'looping-core @ {CI_PLACEHOLDER}' -e '.[test]'" in ci
    assert "# FILL IN" in ci
    assert "ci.yml needs one line filled in" in made.stdout
    # The plugin tutorial shows these commands (its path a placeholder) and this very module.
    tutorial = (Path(__file__).parent / ".." / "docs" / "plugin-tutorial.md").read_text()
    shown = tutorial.split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()
    readme = (plugin / "README.md").read_text()
    commands = readme.split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()
    written = [line.split("  #")[0].strip() for line in commands]
    assert shown[1:] == [line.replace(str(core.path), "/path/to/looping-core") for line in written]
    module = (plugin / "src" / "my_tools" / "plugin.py").read_text()
    assert f"```python\n{module}```" in tutorial
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(site), str(plugin)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    env = {**os.environ, "PYTHONPATH": str(site)}
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=plugin, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout
    key = {"A2A_SIGNING_KEY": json.dumps(ed25519_private_jwk("plugin-key"))}
    checked = looping_cli("check", "--config", str(plugin / "looping.toml"), site=site, env=key)
    assert checked.returncode == 0, checked.stderr
    assert "plugin 'my-tools' (my-tools 0.1.0)" in checked.stdout


def test_a_bad_name_or_a_taken_folder_is_refused(looping_cli: Cli, tmp_path: Path) -> None:
    bad = looping_cli("plugin", "new", "My_Tools", "--dir", str(tmp_path))
    assert bad.returncode == 1
    assert "is not a plugin name" in bad.stderr
    (tmp_path / "taken").mkdir()
    taken = looping_cli("plugin", "new", "taken", "--dir", str(tmp_path))
    assert taken.returncode == 1
    assert "exists already" in taken.stderr


def test_the_example_distribution_passes_its_tests_copied_out_of_the_repository(
    tmp_path: Path,
) -> None:
    """Its tests need nothing of the repository: its own pytest settings, no path outside it."""
    source = Path(__file__).parents[1] / "looping_plugins_example"
    copy = tmp_path / "looping_plugins_example"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-W", "error::pytest.PytestDeprecationWarning"],
        cwd=copy, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout
