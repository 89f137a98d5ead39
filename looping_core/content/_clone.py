"""`clone`: the one way to copy content. Blocks are frozen, but a tool call's `input` is a dict."""

from __future__ import annotations

import copy
from typing import TypeVar

__all__ = ["clone"]

_T = TypeVar("_T")


def clone(value: _T) -> _T:
    """A deep copy of a block, message, conversation or usage: nothing shared with the original."""
    return copy.deepcopy(value)
