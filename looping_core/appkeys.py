"""Every `web.AppKey` of the application, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from looping_core.a2a.edge import Edge
    from looping_core.a2a.jsonrpc import Method
    from looping_core.a2a.jwks import JwksCache

__all__ = ["EDGE", "JWKS_CACHE", "METHODS"]

EDGE: web.AppKey[Edge] = web.AppKey("edge")
JWKS_CACHE: web.AppKey[JwksCache] = web.AppKey("jwks_cache")
METHODS: web.AppKey[Mapping[str, Method]] = web.AppKey("methods")
