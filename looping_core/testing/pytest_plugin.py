"""pytest plugin of looping-core (entry point `pytest11`). Fixtures only; none is autouse."""

from __future__ import annotations

import pytest

from looping_core.testing._validation import PluginValidator

__all__ = ["plugin_validator"]


@pytest.fixture
def plugin_validator() -> PluginValidator:
    """Validate a plugin as the host would at startup, with an empty environment.

    Use `PluginValidator(environ={...})` directly to provide secrets.
    """
    return PluginValidator()
