"""Shared fixtures: throwaway plugin distributions, really built and installed with pip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

PLUGIN_DISTS = Path(__file__).parent / "plugin_dists"


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where pip installed every distribution of tests/plugin_dists/.

    It is not on `sys.path` until a test asks for `installed_test_plugins`, so the rest of the
    suite never sees these (mostly broken) plugins.
    """
    work = tmp_path_factory.mktemp("plugin-dists")
    sources = work / "src"
    shutil.copytree(PLUGIN_DISTS, sources)  # setuptools writes egg-info beside the sources
    site = work / "site"
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
        "--no-build-isolation", "--target", str(site),
        *sorted(str(path) for path in sources.iterdir() if path.is_dir()),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"pip could not install the test plugins:\n{result.stdout}\n{result.stderr}")
    return site


@pytest.fixture
def installed_test_plugins(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the throwaway plugins on `sys.path` for this test only (monkeypatch undoes it)."""
    monkeypatch.syspath_prepend(str(plugin_site))
    return plugin_site


def _run_looping(
    *args: str,
    site: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LOOPING_")}
    if site is not None:
        environment["PYTHONPATH"] = str(site)
    environment.update(env or {})
    script = Path(sys.executable).with_name("looping")
    return subprocess.run(
        [str(script), *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        check=False,
        timeout=120,
    )


@pytest.fixture
def looping_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the installed `looping` console script in a fresh process.

    `looping_cli("check", "--config", path, site=plugin_site, env={...})`; `site` adds the
    throwaway plugins to that process's path.
    """
    return _run_looping
