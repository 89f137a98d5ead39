"""What a model call cost: its usage priced by the deployment's `[prices]` table."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from looping_core.config import ModelPrice, price_of
from looping_core.content import Usage

__all__ = ["Prices", "add_cost"]

_PER = 1_000_000
"""Prices are per million tokens."""


@attrs.frozen
class Prices:
    """The `[prices]` table: by model (`gpt-4o-mini`), or by provider and model
    (`openai:gpt-4o-mini`), which wins."""

    table: Mapping[str, ModelPrice] = attrs.field(factory=dict)

    def __bool__(self) -> bool:
        return bool(self.table)

    def cost(self, label: str, usage: Usage | None) -> float | None:
        """What a call served by the model `label` (`provider:model`) with `usage` cost;
        `None` when the model has no price, or the call reported no usage."""
        provider, _, model = label.partition(":")
        price = price_of(self.table, provider, model) if model else self.table.get(provider)
        if price is None or usage is None:
            return None
        cached = price.input if price.cached_input is None else price.cached_input
        written = price.input if price.cache_write is None else price.cache_write
        return (
            usage.input_tokens * price.input
            + usage.cache_read_tokens * cached
            + usage.cache_creation_tokens * written
            + usage.output_tokens * price.output
        ) / _PER


def add_cost(total: float | None, cost: float | None) -> float | None:
    """A sum of costs, any of which may be unknown (`None`: none of them is known)."""
    if cost is None:
        return total
    return cost if total is None else total + cost
