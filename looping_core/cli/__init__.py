"""The `looping` command line.

Every expected failure is a `LoopingError` and is printed as its message, never as a traceback.
Exit codes: 0 success, 1 validation found problems, 2 usage error (click's own). The commands
live by concern beside this module and attach themselves to `main` when imported here.
"""

from looping_core.cli import _authoring, _db, _evals, _gateway, _run  # noqa: F401 - they attach
from looping_core.cli._main import main

__all__ = ["main"]
