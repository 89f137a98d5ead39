"""`create_app(config)`: the aiohttp application factory (never subclass `web.Application`).

Routes live here, in one place. Everything expensive or fallible (the signing key, the signed
cards) is done when the app is created, so a bad key fails `looping serve` before it listens.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
from aiohttp import web

from looping_core.a2a.edge import (
    CARD_PATH,
    JWKS_PATH,
    build_edge,
    handle_agent_card,
    handle_jwks,
    handle_rpc,
)
from looping_core.a2a.jwks import JwksCache
from looping_core.a2a.methods import METHODS as DEFAULT_METHODS
from looping_core.appkeys import EDGE, JWKS_CACHE, METHODS
from looping_core.config import Config

__all__ = ["create_app"]


def create_app(
    config: Config,
    *,
    environ: Mapping[str, str] | None = None,
    today: datetime.date | None = None,
) -> web.Application:
    """The A2A edge for `config`. Raises `SigningKeyError` if the signing key is unusable."""
    edge = build_edge(config, environ, today)
    app = web.Application(client_max_size=config.server.max_body_bytes)
    app[EDGE] = edge
    app[METHODS] = DEFAULT_METHODS
    app.router.add_get(JWKS_PATH, handle_jwks)
    app.router.add_get(CARD_PATH, handle_agent_card)
    app.router.add_post(config.server.rpc_path, handle_rpc)
    app.cleanup_ctx.append(_jwks_cache(config))
    return app


def _jwks_cache(config: Config) -> Callable[[web.Application], AsyncIterator[None]]:
    """The gateway key cache and its HTTP session live exactly as long as the app."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession() as session:
            app[JWKS_CACHE] = JwksCache(
                session,
                ttl=config.security.jwks_cache_seconds,
                refetch_interval=config.security.jwks_refetch_interval_seconds,
            )
            yield

    return context
