"""Web origins, spelled one way: used by the config (the gateway allowlist) and by the edge
(`jku`, `iss` and push URLs are compared against it). Kept apart so the config does not import
the edge."""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"https": 443, "http": 80}


@functools.lru_cache(maxsize=1024)
def origin_of(url: str) -> str | None:
    """`scheme://host:port` of an http(s) URL, lowercased with the port explicit.

    `None` for anything that must never count as an origin: other schemes, no host, userinfo,
    a fragment, or a malformed port. Remembered for the last 1024 URLs: every call checks the
    same few (a gateway's `jku` and `iss`), and the answer depends on the text alone.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return None
    if parts.fragment or url.endswith("#"):
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or _DEFAULT_PORTS[scheme]}"


def is_bare_origin(text: str) -> bool:
    """Whether `text` is an origin and nothing more (no path, query or fragment)."""
    parts = urlsplit(text)
    return origin_of(text) is not None and parts.path == "" and not parts.query
