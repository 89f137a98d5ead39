"""The A2A methods this edge answers, as rows of the method table."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from looping_core.a2a.edge import CallContext
from looping_core.a2a.jsonrpc import Method
from looping_core.a2a.models import GetExtendedAgentCardRequest

__all__ = ["METHODS"]


async def get_extended_agent_card(
    context: CallContext, params: GetExtendedAgentCardRequest
) -> dict[str, Any]:
    """The verified caller's tenant's own signed card (the tenant was checked against the token)."""
    card = context.edge.tenant_cards[context.identity.tenant]
    result: dict[str, Any] = json.loads(card.body)
    return result


METHODS: Mapping[str, Method] = {
    "GetExtendedAgentCard": Method(GetExtendedAgentCardRequest, get_extended_agent_card),
}
