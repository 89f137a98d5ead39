"""What a handler returns, as the JSON bindings write it: the one place a typed A2A value
becomes ProtoJSON for a `result` (JSON-RPC) or a response body (HTTP+JSON)."""

from __future__ import annotations

import json
from typing import Any

from looping_core.a2a import to_wire
from looping_core.a2a.internal import SignedCard

__all__ = ["wire_result"]


def wire_result(value: Any) -> Any:
    """The ProtoJSON of a handler's answer: a signed card as the very bytes that were signed,
    an empty answer as `{}`, any other value as its ProtoJSON."""
    if value is None:
        return {}
    if isinstance(value, SignedCard):
        return json.loads(value.body)
    return to_wire(value)
