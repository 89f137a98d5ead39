"""The server gives the store the job engine's fair order bound: as far as the default turn
limit counts, for a tenant without a limit of its own; on the embedded runner, no order."""

from __future__ import annotations

from looping_core.config import LimitsConfig, parse_config
from looping_core.server._limits import Limits

CARD = """
name = "Counter"
description = "Counts words."
skills = [{ id = "count", name = "Count", description = "Counts.", tags = ["text"] }]
"""

TENANTS = f"""
[tenants.words]
agent = "looping_plugins_example:WordCountAgent"
[tenants.words.card]
{CARD}
[tenants.words.limits]
caller_turns = 2
tenant_turns = 7

[tenants.free]
agent = "looping_plugins_example:WordCountAgent"
[tenants.free.card]
{CARD}
[tenants.free.limits]
caller_turns = 0
tenant_turns = 0
"""


def test_the_job_engine_counts_a_tenant_without_a_limit_as_far_as_the_default_limit() -> None:
    engine = Limits.from_config(parse_config(TENANTS + '[runner]\nengine = "procrastinate"\n'))
    default = LimitsConfig().tenant_turns
    assert default > 0
    assert engine.turns["words"].counted == (7, 2)  # its own limits
    assert engine.turns["free"].counted == (default, 0)  # no limit: the fair order's bound


def test_the_embedded_runner_counts_only_what_a_limit_needs() -> None:
    embedded = Limits.from_config(parse_config(TENANTS + '[runner]\nengine = "embedded"\n'))
    assert embedded.turns["words"].counted == (7, 2)
    assert embedded.turns["free"].counted == (0, 0)
