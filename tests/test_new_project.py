"""`looping new`: the project it writes installs with its own README's commands into a fresh
virtual environment (looping-core from where it is installed here), passes its own tests,
passes `looping check`, and answers `looping send` through `looping model serve`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from looping_core.a2a import generate_signing_key
from looping_core.plugin_template import CI_PLACEHOLDER, core_source

from support.ports import unused_port

pytestmark = pytest.mark.slow  # processes of its own (see tests/conftest.py)

Cli = Callable[..., subprocess.CompletedProcess[str]]


def _block(readme: str, heading: str) -> list[str]:
    """The lines of the shell block after `heading`."""
    after = readme.split(f"\n{heading}\n", 1)[1]
    return after.split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()


def _run(command: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
        text=True, check=False, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _start(project: Path, *args: str, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as output:
        return subprocess.Popen(
            [str(project / ".venv" / "bin" / "looping"), *args], cwd=project, env=env,
            stdout=output, stderr=output, start_new_session=True,
        )  # fmt: skip


def test_a_new_project_installs_tests_checks_serves_and_answers(
    looping_cli: Cli, tmp_path: Path
) -> None:
    made = looping_cli("new", "word-counter", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    project = tmp_path / "word-counter"
    for part in ("pyproject.toml", "README.md", "looping.toml", "src/word_counter/agent.py",
                 "src/word_counter/__init__.py", "tests/test_agent.py",
                 ".github/workflows/ci.yml", ".gitignore"):  # fmt: skip
        assert (project / part).is_file(), part
    readme = (project / "README.md").read_text()
    install, test = _block(readme, "## Install and test")
    source = core_source()
    assert source.path is not None  # this suite runs on a clone: not from an index
    assert f"'{source.path}[openai]'" in install  # so the project installs this very one
    # No CI runner can reach that folder: the CI's line is marked for the user, who is told.
    ci = (project / ".github/workflows/ci.yml").read_text()
    assert f"pip install 'looping-core[openai] @ {CI_PLACEHOLDER}' -e '.[test]'" in ci
    assert "# FILL IN: looping-core was installed from a folder" in ci
    assert str(source.path) not in ci.replace(f"({source.path})", "")
    assert install in made.stdout  # `looping new` says what to run next
    assert "ci.yml needs one line filled in" in made.stdout
    assert "https://pypi.org" not in readme  # no link to a page that may not exist

    # The own-agent tutorial shows these very commands (its path a placeholder).
    tutorial = (Path(__file__).parent.parent / "docs" / "own-agent.md").read_text()
    shown = [
        line.split("  #")[0].strip() for line in _block("\n" + tutorial, "# Write your own agent")
    ]
    assert shown[1] == install.replace(str(source.path), "/path/to/looping-core")
    assert shown[2] == test
    served = [line.split("  #")[0].strip() for line in _block(readme, "## Serve it and ask it")]
    assert shown[3:] == served

    _run(install, project)  # a fresh venv, as the README says
    tested = _run(test, project)
    assert "4 passed" in tested  # the tool, two turns, and the eval dataset's case

    # Serve it as its README says, on free ports instead of the usual ones.
    port, gateway_port, model_port = unused_port(), unused_port(), unused_port()
    config = project / "looping.toml"
    text = config.read_text()
    for old, new in (("127.0.0.1:8080", f"127.0.0.1:{port}"), ("port = 8080", f"port = {port}"),
                     ("127.0.0.1:9000", f"127.0.0.1:{gateway_port}"),
                     ("127.0.0.1:11434", f"127.0.0.1:{model_port}")):  # fmt: skip
        assert old in text, old
        text = text.replace(old, new)
    config.write_text(text)
    serve_block = "\n".join(_block(readme, "## Serve it and ask it"))
    for command in ("looping check", "looping model serve &", "looping serve &", "looping send"):
        assert f".venv/bin/{command}" in serve_block
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    env["A2A_SIGNING_KEY"] = json.dumps(generate_signing_key("agent-key"))
    assert "OK. Plugins: none. Tenants: word-counter." in _run(
        ".venv/bin/looping check", project, env
    )
    model = _start(project, "model", "serve", "--port", str(model_port), log=tmp_path / "m.log",
                   env=env)  # fmt: skip
    serving = _start(project, "serve", log=tmp_path / "serve.log", env=env)
    try:
        sent = _run(
            '.venv/bin/looping send --tenant word-counter "How many words are here?"',
            project, env, timeout=120,
        )  # fmt: skip
        evaluated = _run(".venv/bin/looping eval evals/word-counter.toml", project, env)
    finally:
        for process in (serving, model):
            process.terminate()
            process.wait(timeout=30)
    head, *rest = sent.splitlines()
    assert head.startswith("TASK_STATE_COMPLETED  task ")
    assert '[answer] {"count_words": 5}' in rest  # the local endpoint called the tool on it
    assert "1 of 1 runs passed (100%)" in evaluated  # its eval dataset, against the served agent


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("My_Agent", "is not a project name: use lowercase letters"),
        ("json", "would be the package 'json', which is already importable here"),
    ],
)
def test_a_bad_name_is_refused(looping_cli: Cli, tmp_path: Path, name: str, says: str) -> None:
    refused = looping_cli("new", name, "--dir", str(tmp_path))
    assert refused.returncode == 1
    assert says in refused.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_taken_folder_is_refused(looping_cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    taken = looping_cli("new", "taken", "--dir", str(tmp_path))
    assert taken.returncode == 1
    assert "exists already" in taken.stderr
