"""Token usage of one model call, or of many added together."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["MAX_TOKENS", "Usage"]

MAX_TOKENS = 2**53 - 1
"""Counts saturate here instead of overflowing: the largest integer JSON carries exactly."""


def _count(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an integer")
    if not 0 <= value <= MAX_TOKENS:
        raise ValueError(f"{attribute.name} must be between 0 and 2**53-1")


def _reasoning_within_output(instance: Usage, attribute: attrs.Attribute[int], value: int) -> None:
    if value > instance.output_tokens:
        raise ValueError("reasoning_tokens are part of output_tokens, so cannot exceed them")


@attrs.frozen
class Usage:
    """Token counts.

    - `input_tokens`: prompt tokens read without a cache;
    - `cache_read_tokens`, `cache_creation_tokens`: prompt tokens read from / written to a cache;
    - `output_tokens`: generated tokens, of which `reasoning_tokens` were reasoning (a subset,
      never an addend);
    - `context_tokens`: how full the context window was (for a sum: the largest seen).
    """

    input_tokens: int = attrs.field(default=0, validator=_count)
    output_tokens: int = attrs.field(default=0, validator=_count)
    cache_read_tokens: int = attrs.field(default=0, validator=_count)
    cache_creation_tokens: int = attrs.field(default=0, validator=_count)
    reasoning_tokens: int = attrs.field(default=0, validator=[_count, _reasoning_within_output])
    context_tokens: int = attrs.field(default=0, validator=_count)

    @property
    def total_input_tokens(self) -> int:
        return _saturate(self.input_tokens + self.cache_read_tokens + self.cache_creation_tokens)

    @property
    def total_tokens(self) -> int:
        return _saturate(self.total_input_tokens + self.output_tokens)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=_saturate(self.input_tokens + other.input_tokens),
            output_tokens=_saturate(self.output_tokens + other.output_tokens),
            cache_read_tokens=_saturate(self.cache_read_tokens + other.cache_read_tokens),
            cache_creation_tokens=_saturate(
                self.cache_creation_tokens + other.cache_creation_tokens
            ),
            reasoning_tokens=_saturate(self.reasoning_tokens + other.reasoning_tokens),
            context_tokens=max(self.context_tokens, other.context_tokens),
        )


def _saturate(value: int) -> int:
    return min(value, MAX_TOKENS)
