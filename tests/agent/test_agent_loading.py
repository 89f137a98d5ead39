"""A tenant's `agent = "module:Class"` is imported from the installed packages, else from the
config file's folder (`beside`), and only then is that folder put on the path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from looping_core.agent import AgentLoadError
from looping_core.agent.internal import load_agent_class

MODULE = """
from looping_core.agent import Agent, TurnResult


class Beside(Agent):
    async def run(self, turn):
        return TurnResult()
"""


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "lpt_beside_config.py").write_text(MODULE)
    before = list(sys.path)
    yield tmp_path
    sys.path[:] = before
    sys.modules.pop("lpt_beside_config", None)


def test_a_module_beside_the_config_is_found(folder: Path) -> None:
    found = load_agent_class("t", "lpt_beside_config:Beside", beside=folder)
    assert found.__name__ == "Beside"
    assert sys.path[-1] == str(folder)  # after the installed packages


def test_without_the_folder_it_is_not_found_and_the_error_says_where_to_put_it(
    folder: Path,
) -> None:
    with pytest.raises(AgentLoadError, match="No module named 'lpt_beside_config'"):
        load_agent_class("t", "lpt_beside_config:Beside")
    elsewhere = folder / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(AgentLoadError, match=f"put it in {elsewhere}"):
        load_agent_class("t", "lpt_beside_config:Beside", beside=elsewhere)
    assert str(elsewhere) not in sys.path  # a folder without the module is never added
