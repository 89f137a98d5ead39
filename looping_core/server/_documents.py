"""The routes of the edge's own documents: the agent card and the key set, each with its HTTP
validators (`ETag`, `Last-Modified`) and a 304 for a client whose copy is current."""

from __future__ import annotations

import datetime
import email.utils

from aiohttp import web

from looping_core.server._edge import CACHE_CONTROL
from looping_core.server._services import SERVICES

__all__ = ["handle_agent_card", "handle_jwks"]


async def handle_jwks(request: web.Request) -> web.Response:
    edge = request.app[SERVICES].edge
    return _cached(request, edge.jwks_body, edge.jwks_etag, edge.modified)


async def handle_agent_card(request: web.Request) -> web.Response:
    edge = request.app[SERVICES].edge
    return _cached(request, edge.stub.body, edge.stub.etag, edge.modified)


def _cached(
    request: web.Request, body: bytes, etag: str, modified: datetime.datetime
) -> web.Response:
    """`body` with its validators (`ETag`, `Last-Modified`); 304 when the client's copy is
    current (`If-None-Match` decides when sent, else `If-Modified-Since`)."""
    headers = {
        "ETag": etag,
        "Last-Modified": email.utils.format_datetime(modified, usegmt=True),
        "Cache-Control": CACHE_CONTROL,
    }
    matches = request.headers.get("If-None-Match")
    if matches is not None:
        if etag in _etags(matches):
            return web.Response(status=304, headers=headers)
    elif _not_modified_since(request.headers.get("If-Modified-Since"), modified):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, content_type="application/json", headers=headers)


def _not_modified_since(header: str | None, modified: datetime.datetime) -> bool:
    if not header:
        return False
    try:
        since = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return False  # an unreadable date is ignored, as RFC 9110 says
    if since.tzinfo is None:
        return False
    return modified <= since


def _etags(header: str) -> set[str]:
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return tags | ({"*"} if "*" in tags else set())
