"""A plugin whose import fails; it leaves a marker file first, to prove whether it was imported."""

import os
import pathlib

if os.environ.get("LPT_IMPORT_MARKER"):
    pathlib.Path(os.environ["LPT_IMPORT_MARKER"]).touch()

import lpt_missing_dependency  # noqa: F401
