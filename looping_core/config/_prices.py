"""`[prices]`: what each model's tokens cost. Read into `ModelPrice` records, checked for
range, and checked against the budgets in money: a tenant that has one must have a price for
every model it names, or its budget could not count a call."""

from __future__ import annotations

import math
from collections.abc import Mapping

from looping_core.config._model import LimitsConfig, ModelChoice, ModelPrice, TenantConfig

__all__ = ["check_priced", "check_prices", "price_of"]

_HIGHEST = 1e9
"""No price per million tokens above this (a typo in the exponent, not a price)."""


def price_of(prices: Mapping[str, ModelPrice], provider: str, model: str) -> ModelPrice | None:
    """The price of `model` served by `provider`: its `"provider:model"` entry, else its bare
    `"model"` entry (`None`: not priced)."""
    return prices.get(f"{provider}:{model}") or prices.get(model)


def check_prices(prices: Mapping[str, ModelPrice]) -> list[str]:
    """Every price is a number from 0 up, per million tokens."""
    problems = []
    for key, price in prices.items():
        path = f'$.prices."{key}"'
        if not key.strip():
            problems.append(
                f"a price names its model (`gpt-4o-mini`, `openai:gpt-4o-mini`) @ {path}"
            )
        for name in ("input", "output", "cached_input", "cache_write"):
            value = getattr(price, name)
            if value is not None and not (math.isfinite(value) and 0 <= value <= _HIGHEST):
                problems.append(
                    f"{name} must be a price per million tokens from 0 to {_HIGHEST:g}"
                    f" @ {path}.{name}"
                )
    return problems


def check_priced(
    tenants: Mapping[str, TenantConfig], limits: LimitsConfig, prices: Mapping[str, ModelPrice]
) -> list[str]:
    """A tenant with a budget in money (`loop.max_cost`, or `caller_daily_cost` of its own or
    `[limits]`) has a price for its model and each fallback."""
    problems = []
    for tenant_id, tenant in tenants.items():
        daily = tenant.limits.over(limits).caller_daily_cost
        if tenant.model is None or (tenant.loop.max_cost is None and not daily):
            continue
        path = f"$.tenants.{tenant_id}.model"
        choices: list[tuple[str, ModelChoice]] = [(path, tenant.model)]
        choices += [(f"{path}.fallback[{i}]", c) for i, c in enumerate(tenant.model.fallback)]
        budget = "loop.max_cost" if tenant.loop.max_cost is not None else "caller_daily_cost"
        for where, choice in choices:
            if price_of(prices, choice.provider, choice.model) is None:
                problems.append(
                    f"model {choice.model!r} has no price, and tenant {tenant_id!r} has a budget "
                    f'in money ({budget}); add [prices."{choice.model}"] with input and output '
                    f"@ {where}.model"
                )
    return problems
