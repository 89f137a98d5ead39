"""Usage: derived totals, invariants, saturating addition."""

from __future__ import annotations

import pytest

from looping_core.content import Usage
from looping_core.content._usage import MAX_TOKENS


def test_totals_are_derived() -> None:
    usage = Usage(
        input_tokens=100,
        output_tokens=50,
        cache_read_tokens=20,
        cache_creation_tokens=5,
        reasoning_tokens=30,
    )
    assert usage.total_input_tokens == 125
    assert usage.total_tokens == 175  # reasoning is inside output, never added on top


def test_reasoning_is_a_subset_of_output() -> None:
    with pytest.raises(ValueError, match="reasoning_tokens are part of output_tokens"):
        Usage(output_tokens=10, reasoning_tokens=11)


@pytest.mark.parametrize(
    "field", ["input_tokens", "output_tokens", "cache_read_tokens", "context_tokens"]
)
def test_counts_are_non_negative_integers(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Usage(**{field: -1})
    with pytest.raises(TypeError, match=field):
        Usage(**{field: 1.5})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=field):
        Usage(**{field: MAX_TOKENS + 1})


def test_addition_sums_counts_and_keeps_the_peak_context() -> None:
    total = Usage(1, 2, 3, 4, 1, context_tokens=500) + Usage(10, 20, 30, 40, 10, context_tokens=300)
    assert total == Usage(11, 22, 33, 44, 11, context_tokens=500)


def test_addition_saturates_instead_of_overflowing() -> None:
    big = Usage(input_tokens=MAX_TOKENS, output_tokens=MAX_TOKENS, reasoning_tokens=MAX_TOKENS)
    total = big + big
    assert (total.input_tokens, total.output_tokens, total.reasoning_tokens) == (MAX_TOKENS,) * 3
    assert total.total_tokens == MAX_TOKENS
