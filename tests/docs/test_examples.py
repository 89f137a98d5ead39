"""The tutorials' code runs: every Python and shell block of a tutorial page says how it is
tested, in a comment before it, and the blocks this module runs are run as written.

- `<!-- example: runs -->`: run here. A shell block runs in bash in a sandbox laid out like a
  clone (this environment's `.venv`, a copy of `examples/` on free ports, its own home for the
  local gateway's key); `looping model serve` is told the model server's free port; what it
  leaves in the background is stopped, and waited for, after it. A Python block
  with tests is run by pytest in that sandbox. An `output` block right after it is what it must
  print (`...` stands for any text).
- `<!-- example: module NAME -->`: a Python block that is the module `NAME` the page's other
  blocks import (it is written into the sandbox, and run by the tests that use it).
- `<!-- example: file NAME -->`: a block that is the file `NAME` the page's commands use (a
  module, a config), written into the sandbox before they run (its ports, the example config's
  and those in the commands moved to free ones).
- `<!-- example: tested-by PATH::TEST -->`: run by that test, which reads it from the page.
- `<!-- example: excerpt -->`: a piece of a whole shown elsewhere; only its syntax is checked.

A block with no such comment fails here, so the tutorials cannot gain code the suite never runs.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from looping_core.a2a import generate_signing_key

from support.ports import unused_port

ROOT = Path(__file__).parents[2]


def _tutorials() -> tuple[str, ...]:
    """The pages of the site's Tutorials section, as mkdocs.yml lists them: a tutorial added
    there is held to this module's rules without being named here too."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    [section] = [entry["Tutorials"] for entry in nav if "Tutorials" in entry]
    return tuple(page for entry in section for page in entry.values())


TUTORIALS = _tutorials()

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\s*$")
MARK = re.compile(r"^\s*<!-- example: (?P<how>[\w-]+)(?: (?P<arg>\S+))? -->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    how: str | None
    arg: str | None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks(page: str) -> Iterator[Block]:
    lines = (ROOT / "docs" / page).read_text().splitlines()
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if opened is None:
            index += 1
            continue
        indent, start = opened["indent"], index
        index += 1
        body = []
        while not lines[index].startswith(f"{indent}```"):
            body.append(lines[index].removeprefix(indent))
            index += 1
        index += 1
        how = arg = None
        before = start - 1
        while before >= 0 and lines[before].strip().startswith("<!--"):
            marked = MARK.match(lines[before])
            if marked:
                how, arg = marked["how"], marked["arg"]
            before -= 1
        code = "\n".join(body) + "\n"
        yield Block(page, start + 1, opened["lang"], code, how, arg)


def _all_blocks() -> list[Block]:
    return [block for page in TUTORIALS for block in _blocks(page)]


def _code_blocks(how: str | None = None) -> list[Block]:
    return [
        block
        for block in _all_blocks()
        if block.lang in ("python", "sh") and (how is None or block.how == how)
    ]


def test_every_tutorial_block_says_how_it_is_tested() -> None:
    unmarked = [block.name for block in _code_blocks() if block.how is None]
    assert unmarked == [], f"blocks with no <!-- example: ... --> comment: {unmarked}"
    kinds = {block.how for block in _code_blocks()}
    assert kinds <= {"runs", "module", "file", "tested-by", "excerpt"}, kinds


@pytest.mark.parametrize("block", _code_blocks("tested-by"), ids=lambda block: block.name)
def test_a_block_tested_elsewhere_is_read_by_that_test(block: Block) -> None:
    assert block.arg is not None, block.name
    assert "::" in block.arg, block.name
    path, test = block.arg.split("::", 1)
    source = (ROOT / path).read_text()
    assert f"def {test}(" in source, f"{block.name}: no test {test} in {path}"
    assert block.page in source, f"{block.name}: {path} does not read docs/{block.page}"


@pytest.mark.parametrize("block", _code_blocks("excerpt"), ids=lambda block: block.name)
def test_an_excerpt_is_valid_code(block: Block) -> None:
    if block.lang == "python":
        ast.parse(block.code, filename=block.name)
    else:
        checked = subprocess.run(
            ["bash", "-n"], input=block.code, text=True, capture_output=True, check=False
        )
        assert checked.returncode == 0, f"{block.name}: {checked.stderr}"


# -- the blocks run here --------------------------------------------------------------------------


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """A folder laid out like a clone after the main command: `.venv` (this one), `examples/`
    on free ports, and a home of its own (the local gateway keeps its key there)."""
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "home").mkdir()
    # As a `looping new` project's pyproject.toml has it: async tests run without a mark.
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    return tmp_path


MODEL_PORT = "11434"
"""Where `looping model serve` listens unless told (`--port`), and the pages' configs look for
it."""


def _lay_out(sandbox: Path, page: str) -> dict[str, str]:
    """Write the page's files and modules into the sandbox, and move every config in it to
    free ports (the model server's too: blocks run side by side, and a developer's own model
    server may hold 11434); the ports moved."""
    for block in _all_blocks():
        if block.page == page and block.how in ("module", "file"):
            name = f"{block.arg}.py" if block.how == "module" else str(block.arg)
            (sandbox / name).write_text(block.code)
    moved = {port: str(_free_port()) for port in ("8080", "9000", "9464", MODEL_PORT)}
    for config in [*sandbox.glob("*.toml"), *sandbox.glob("examples/*.toml")]:
        text = config.read_text()
        for port, free in moved.items():
            text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
        for port, free in moved.items():
            text = text.replace(f"port = {port}", f"port = {free}")
        config.write_text(text)
    return moved


def _free_port() -> int:
    """A port free now, below the kernel's ephemeral range: the page's processes bind it
    seconds later, and in between an outgoing connection of the suite (whose source ports are
    ephemeral ones) could take a port `unused_port` chose; it happened."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    for _ in range(100):
        port = random.randint(max(1024, low - 12000), low - 1)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    return unused_port()


def _environment(sandbox: Path, database_url: str | None = None) -> dict[str, str]:
    """The shell a tutorial's reader has after the main command: the agent's key exported (and,
    for a page on PostgreSQL, `DATABASE_URL`: a fresh database on the suite's server)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("LOOPING_") and key != "DATABASE_URL"
    }
    env.update(HOME=str(sandbox / "home"), XDG_STATE_HOME=str(sandbox / "home" / "state"))
    env["A2A_SIGNING_KEY"] = json.dumps(generate_signing_key("tutorial-key"))
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    return env


def _database_url(block: Block, request: pytest.FixtureRequest) -> str | None:
    """A fresh PostgreSQL database for a block whose page's config reads `DATABASE_URL` (skipped
    without PostgreSQL, unless the suite requires it)."""
    page = [b for b in _all_blocks() if b.page == block.page]
    if not any("env:DATABASE_URL" in b.code or "$DATABASE_URL" in b.code for b in page):
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


def _matches(expected: str, printed: str) -> bool:
    """`printed` is `expected`, where a word shortened with `...` (`0b6c...`) stands for any
    word: ids differ from run to run."""

    def line_pattern(line: str) -> str:
        parts = re.split(r"(\S*\.\.\.)", line)
        return "".join(r"\S+" if part.endswith("...") else re.escape(part) for part in parts)

    pattern = "\n".join(line_pattern(line) for line in expected.splitlines())
    return re.fullmatch(pattern + "\n?", printed) is not None


def _run_shell(
    block: Block, sandbox: Path, moved: dict[str, str], database_url: str | None = None
) -> str:
    code = block.code
    for port, free in moved.items():  # the commands' URLs, moved as the configs' were
        code = code.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
    # The model server listens where the configs now look for it.
    code = code.replace("looping model serve", f"looping model serve --port {moved[MODEL_PORT]}")
    # The block's background processes are stopped, and waited for, as it ends.
    stop = "kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true"
    script = f"set -euo pipefail\ntrap '{stop}' EXIT\n" + code
    done = subprocess.run(
        ["bash", "-c", script], cwd=sandbox, env=_environment(sandbox, database_url),
        capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"{block.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def _output_after(block: Block) -> str | None:
    blocks = list(_blocks(block.page))
    following = blocks[blocks.index(block) + 1 :]
    if following and following[0].lang == "" and following[0].how == "output":
        return following[0].code
    return None


def _run_here(lang: str) -> list[Any]:
    """The page blocks in `lang` this module runs, as test parameters named by their place."""
    blocks = [block for block in _code_blocks("runs") if block.lang == lang]
    return [pytest.param(block, id=block.name) for block in blocks]


@pytest.mark.slow
@pytest.mark.parametrize("block", _run_here("sh"))
def test_a_shell_block_runs_as_written(
    block: Block, sandbox: Path, request: pytest.FixtureRequest
) -> None:
    moved = _lay_out(sandbox, block.page)
    printed = _run_shell(block, sandbox, moved, _database_url(block, request))
    expected = _output_after(block)
    if expected is not None:
        assert _matches(expected, printed), f"{block.name} printed:\n{printed}"


@pytest.mark.slow
@pytest.mark.parametrize("block", _run_here("python"))
def test_a_python_block_runs_as_written(block: Block, sandbox: Path) -> None:
    _lay_out(sandbox, block.page)
    if "def test_" in block.code:
        (sandbox / "test_example.py").write_text(block.code)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_example.py",
        ]
    else:
        (sandbox / "example.py").write_text(block.code)
        command = [sys.executable, "example.py"]
    done = subprocess.run(
        command, cwd=sandbox, env={**_environment(sandbox), "PYTHONPATH": str(sandbox)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{block.name}:\n{done.stdout}\n{done.stderr}"
