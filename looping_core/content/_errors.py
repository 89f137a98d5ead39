"""Typed errors of the content codec and accumulator. Each names the field, never its value."""

from __future__ import annotations

from looping_core.errors import LoopingError

__all__ = [
    "AccumulatorError",
    "BlockTooLarge",
    "ContentDecodeError",
    "ContentError",
    "InvalidText",
    "InvalidValue",
    "MissingField",
    "NoA2AForm",
    "TooManyBlocks",
    "UnknownField",
    "UnknownTag",
    "WrongType",
]


class ContentError(LoopingError):
    """Base of every error about conversation content."""


class ContentDecodeError(ContentError):
    """A document does not decode. `path` is where (`$.content[2].text`); `others` are the
    further problems found in the same document, if any."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        self.others: tuple[ContentDecodeError, ...] = ()
        super().__init__(f"{problem} @ {path}")


class UnknownTag(ContentDecodeError):
    """A block's `type` or a message's `role` is not one this package defines."""


class UnknownField(ContentDecodeError):
    """A record has a field its schema does not define."""


class MissingField(ContentDecodeError):
    """A required field is absent."""


class WrongType(ContentDecodeError):
    """A field holds the wrong JSON type."""


class InvalidText(ContentDecodeError):
    """The document is not UTF-8, or a string holds a lone surrogate."""


class InvalidValue(ContentDecodeError):
    """The fields are well typed but break a rule (an image with both url and data, ...)."""


class BlockTooLarge(ContentDecodeError):
    """One block is over the size cap."""


class TooManyBlocks(ContentDecodeError):
    """A message has more blocks than the cap."""


class AccumulatorError(ContentError):
    """A chunk stream cannot be folded into blocks (two tool calls on one index, bad JSON...)."""


class NoA2AForm(ContentError):
    """A block kind has no A2A `Part` form (thinking, tool use, tool result, refusal)."""
