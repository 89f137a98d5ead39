"""Plugin `example-gates`: mute turns that start with a prefix; log displaced messages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs

from looping_core.contract import PluginInfo, SessionRef, Turn
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl

log = logging.getLogger(__name__)


@attrs.frozen
class GatesConfig:
    """`[plugins.example-gates]`."""

    mute_prefix: str = "/mute"
    """A turn whose text starts with this is not handled."""


def _text_of(message: Any) -> str:
    if isinstance(message, str):
        return message
    text = getattr(message, "text", None)
    return text if isinstance(text, str) else ""


@hookimpl
def contract_version() -> int:
    return CONTRACT_VERSION


@hookimpl
def plugin_info() -> PluginInfo:
    return PluginInfo(
        capability="Skips turns that start with a mute prefix and logs compacted messages.",
        config_type=GatesConfig,
    )


@hookimpl
async def should_handle_turn(turn: Turn, config: GatesConfig) -> bool:
    return not _text_of(turn.message).lstrip().startswith(config.mute_prefix)


@hookimpl
def messages_displaced(messages: Sequence[Any], session: SessionRef) -> None:
    log.info(
        "%d message(s) displaced from context %s of tenant %s",
        len(messages),
        session.context_id,
        session.tenant,
    )
