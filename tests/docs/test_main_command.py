"""The README's main command, the newcomer's first step, works as written in a fresh copy of the
project: it makes a new virtual environment, installs looping-core with the example plugins,
makes a key, checks the example config, lists the plugins and brings the store up to date. The
first tutorial shows the same command."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.slow


def _main_command(page: Path) -> str:
    text = page.read_text()
    found = re.search(r"<!-- main-command -->\n```sh\n(.*?)\n```", text, re.S)
    if found is None:  # the tutorial shows it without the README's marker
        found = re.search(r"```sh\n(python3 -m venv .venv && .*?)\n```", text, re.S)
    assert found is not None, page
    return found.group(1)


def _copy_of_the_project(target: Path) -> Path:
    """What a clone holds: the files git tracks (or, outside git, the tree without what the
    work made: environments, databases, the built site)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode == 0 and listed.stdout:
        for name in listed.stdout.decode().split("\0"):
            if name and (ROOT / name).is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, target / name)
    else:
        skipped = shutil.ignore_patterns(".venv*", "site", "*.db", "*.db-*", "__pycache__", ".git")
        shutil.copytree(ROOT, target, ignore=skipped, dirs_exist_ok=True)
    return target


def _newcomers_shell(home: Path) -> dict[str, str]:
    """This environment without this suite's virtual environment or anything of looping's."""
    ours = str(Path(sys.prefix) / "bin")
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "VIRTUAL_ENV" and not key.startswith(("LOOPING_", "A2A_"))
    }
    env["PATH"] = os.pathsep.join(
        entry for entry in env.get("PATH", "").split(os.pathsep) if entry != ours
    )
    env["HOME"] = str(home)
    return env


def test_the_main_command_runs_in_a_fresh_copy(tmp_path: Path) -> None:
    command = _main_command(ROOT / "README.md")
    assert _main_command(ROOT / "docs" / "first-turn.md") == command
    project = _copy_of_the_project(tmp_path / "looping-core")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command], cwd=project, capture_output=True, text=True,
        timeout=900, check=False, env=_newcomers_shell(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "example-notes" in done.stdout  # `looping plugins list`
    assert (project / "examples" / "looping.db").is_file()  # `looping db upgrade`
