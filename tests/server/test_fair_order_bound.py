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


def tenant(name: str, caller_turns: int, tenant_turns: int) -> str:
    return (
        f'[tenants.{name}]\nagent = "looping_plugins_example:WordCountAgent"\n'
        f"[tenants.{name}.card]\n{CARD}\n"
        f"[tenants.{name}.limits]\ncaller_turns = {caller_turns}\ntenant_turns = {tenant_turns}\n"
    )


TENANTS = tenant("words", 2, 7) + tenant("free", 0, 0)


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
