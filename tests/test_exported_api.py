"""The public API is what contracts/exported_api.txt says, no more and no less."""

from __future__ import annotations

import importlib
from pathlib import Path

from api_snapshot import public_modules, render

SNAPSHOT = Path(__file__).parents[1] / "contracts" / "exported_api.txt"


def test_public_api_matches_the_snapshot() -> None:
    assert render() == SNAPSHOT.read_text(), (
        "the public API changed; if that is intended, run "
        "`python tests/api_snapshot.py > contracts/exported_api.txt` and review the diff"
    )


def test_every_public_module_declares_all() -> None:
    missing = [m for m in public_modules() if not hasattr(importlib.import_module(m), "__all__")]
    assert missing == []
