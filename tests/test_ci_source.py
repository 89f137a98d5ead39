"""Where a generated project's CI installs looping-core from: a requirement by name when it came
from an index, the VCS URL and commit when it came from one (read from PEP 610's
`direct_url.json`), and otherwise a line marked FILL IN (a folder on this machine is on no CI
runner). Each kind of line is run by pip in a fresh venv, from another folder."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from looping_core.plugin_template import CI_PLACEHOLDER, CoreSource, core_source, install_words

ROOT = Path(__file__).parent.parent


def fake_install(site: Path, direct_url: dict[str, object] | None) -> list[str]:
    """A looping-core dist-info in `site`, with `direct_url` as its `direct_url.json`."""
    info = site / "looping_core-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: looping-core\nVersion: 0.1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return [str(site)]


def test_an_index_release_is_a_requirement_by_name_everywhere(tmp_path: Path) -> None:
    source = core_source(fake_install(tmp_path, None))
    assert source == CoreSource()
    assert source.reachable
    assert install_words(source, "openai") == {
        "core_link": "looping-core",
        "core": "",
        "ci_core": "",
        "ci_note": "",
    }


def test_a_vcs_install_is_repeated_from_its_url_and_commit(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    direct_url = {
        "url": "https://github.com/example/looping-core",
        "vcs_info": {"vcs": "git", "commit_id": commit, "requested_revision": "main"},
    }
    source = core_source(fake_install(tmp_path, direct_url))
    spec = f"'looping-core[openai] @ git+https://github.com/example/looping-core@{commit}'"
    assert source.reachable
    assert source.pip_argument("openai") == spec
    assert source.ci_argument("openai") == spec
    assert install_words(source, "openai")["ci_note"] == ""


def test_a_folder_install_gets_a_marked_line_in_ci(tmp_path: Path) -> None:
    folder = tmp_path / "clone"
    direct_url = {"url": folder.as_uri(), "dir_info": {"editable": True}}
    source = core_source(fake_install(tmp_path / "site", direct_url))
    assert source == CoreSource(folder, editable=True)
    assert not source.reachable
    words = install_words(source, "openai")
    assert words["core"] == f" -e '{folder}[openai]'"  # on this machine: the folder itself
    assert words["ci_core"] == f" 'looping-core[openai] @ {CI_PLACEHOLDER}'"
    assert "FILL IN" in words["ci_note"]
    assert str(folder) in words["ci_note"]
    assert all(line.startswith("      # ") for line in words["ci_note"].splitlines())


def fresh_venv(folder: Path) -> Path:
    """A venv with today's pip, as a CI runner's Python has (the one Python bundles may be too
    old to read a `git+file:` URL)."""
    venv.create(folder, with_pip=True, upgrade_deps=True)
    return folder / "bin" / "python"


def pip_install(python: Path, cwd: Path, *arguments: str) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", *arguments],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def installed(python: Path, cwd: Path) -> dict[str, object]:
    """The fresh venv's looping-core: its version and `direct_url.json` (run in `cwd`: a
    checkout's own egg-info would be found first)."""
    script = (
        "import importlib.metadata as m, json; d = m.distribution('looping-core');"
        "print(json.dumps({'version': d.version, 'direct': d.read_text('direct_url.json')}))"
    )
    result = subprocess.run(
        [str(python), "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    found: dict[str, object] = json.loads(result.stdout)
    return found


@pytest.mark.slow
def test_the_ci_lines_install_looping_core_in_a_fresh_venv_elsewhere(tmp_path: Path) -> None:
    """The VCS line and the index one (the project's own dependency, found by name in a folder
    of wheels standing in for an index), each run by pip in a fresh venv, from another folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    vcs = CoreSource(vcs=f"git+{ROOT.as_uri()}@{commit}")
    python = fresh_venv(tmp_path / "vcs-venv")
    pip_install(python, elsewhere, vcs.ci_argument("openai").strip("'"))
    found = installed(python, elsewhere)
    assert json.loads(str(found["direct"]))["vcs_info"]["commit_id"] == commit

    wheels = tmp_path / "index"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    requirement = "looping-core[openai]>=0.1,<0.2"  # the generated project's own dependency
    template = (ROOT / "looping_core/project_template/pyproject.toml.tmpl").read_text()
    assert f'dependencies = ["{requirement}"]' in template
    python = fresh_venv(tmp_path / "index-venv")
    pip_install(python, elsewhere, "--no-index", "--find-links", str(wheels), requirement)
    assert installed(python, elsewhere)["direct"] is None  # from the index, by name
