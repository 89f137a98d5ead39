"""Fetching and caching gateways' key sets, without letting a caller turn tokens into fetches.

- Per-`jku` cache with a TTL, at most `max_sets_per_origin` key sets per gateway origin (the
  least recently used one goes), so nothing grows per URL a caller makes up.
- An unknown `kid` refetches at most once per `refetch_interval` per `jku`, so a flood of random
  kids costs at most one fetch per interval; a failed fetch is rate-limited the same way.
- A `jku` not in the cache is fetched at most once per `refetch_interval` per gateway *origin*,
  whatever its path or query: a token with a bad signature and a fresh path on an allowed origin
  costs at most one fetch per interval, however many such tokens come. Key sets in the cache have
  budgets of their own, so such a flood never delays a known gateway's refetch.
- Concurrent requests for the same `jku` share one in-flight fetch.
- Bounded timeout and response size; redirects are not followed (they could leave the allowlisted
  origin); non-JSON or malformed key sets are refused.

Callers must check that `jku` is on the allowlist *before* asking for a key.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import urlsplit

import aiohttp
import attrs
from joserfc.jwk import OKPKey

from looping_core import _metrics, _tracing
from looping_core.a2a._jose import public_key
from looping_core.errors import CheckFailed

__all__ = ["JwksCache", "JwksError"]


class JwksError(CheckFailed):
    """A key could not be had: `check` is `unknown-kid` or `jwks-unavailable`."""

    subject = "gateway key"


@attrs.define
class _Entry:
    keys: dict[str, OKPKey]
    fetched_at: float


class JwksCache:
    """Ed25519 keys by (`jku`, `kid`), fetched over HTTP and cached."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        ttl: float = 300.0,
        refetch_interval: float = 30.0,
        timeout: float = 5.0,
        max_bytes: int = 64 * 1024,
        max_sets_per_origin: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._ttl = ttl
        self._refetch_interval = refetch_interval
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._max_bytes = max_bytes
        self._max_sets = max_sets_per_origin
        self._clock = clock
        self._entries: dict[str, OrderedDict[str, _Entry]] = {}
        """Key sets by origin, then by `jku`, least recently used first."""
        self._attempted_at: dict[str, float] = {}
        """When each cached `jku` was last fetched (dropped with its key set)."""
        self._new_attempted_at: dict[str, float] = {}
        """When a `jku` not in the cache was last fetched, by origin (allowlisted: bounded)."""
        self._in_flight: dict[str, asyncio.Future[_Entry]] = {}

    async def key(self, jku: str, kid: str) -> OKPKey:
        """The key `kid` of the set at `jku` (whose origin the caller found on the allowlist);
        `JwksError` if it cannot be had."""
        origin = _origin(jku)
        sets = self._entries.get(origin)
        entry = sets.get(jku) if sets is not None else None
        now = self._clock()
        stale = entry is None or now - entry.fetched_at >= self._ttl
        unknown = entry is not None and kid not in entry.keys
        if entry is None:
            last = self._new_attempted_at.get(origin, -float("inf"))
        else:
            last = self._attempted_at.get(jku, -float("inf"))
            assert sets is not None
            sets.move_to_end(jku)  # recently used: the last to be dropped
        may_fetch = now - last >= self._refetch_interval
        if (stale or unknown) and (may_fetch or jku in self._in_flight):
            if entry is None and jku not in self._in_flight:
                self._new_attempted_at[origin] = now
            entry = await self._refresh(jku, previous=entry)
        elif entry is not None:
            _metrics.JWKS_CACHE_HITS.inc()
        if entry is None:
            raise JwksError(
                "jwks-unavailable", "the gateway's key set could not be fetched recently"
            )
        key = entry.keys.get(kid)
        if key is None:
            raise JwksError("unknown-kid", "no key with this kid in the gateway's key set")
        return key

    async def _refresh(self, jku: str, previous: _Entry | None) -> _Entry | None:
        future = self._in_flight.get(jku)
        if future is None:
            if previous is not None:  # a new `jku`'s attempt is its origin's (nothing per URL)
                self._attempted_at[jku] = self._clock()
            future = asyncio.ensure_future(self._fetch_and_store(jku))
            self._in_flight[jku] = future
        try:
            return await asyncio.shield(future)
        except JwksError:
            return previous  # keep serving the keys we had, if any

    async def _fetch_and_store(self, jku: str) -> _Entry:
        """Fetch, then store the result and retire the in-flight fetch in one step: a request
        arriving in between would find neither the fetch nor its keys."""
        try:
            with _tracing.span("jwks fetch", kind="client", url__full=jku):
                entry = await self._fetch(jku)
            self._keep(jku, entry)
            _metrics.JWKS_FETCHES.inc(outcome="ok")
            return entry
        except BaseException:
            _metrics.JWKS_FETCHES.inc(outcome="failed")
            raise
        finally:
            self._in_flight.pop(jku, None)

    def _keep(self, jku: str, entry: _Entry) -> None:
        """Cache `entry`, dropping its origin's least recently used key set beyond the bound."""
        sets = self._entries.setdefault(_origin(jku), OrderedDict())
        sets[jku] = entry
        sets.move_to_end(jku)
        self._attempted_at.setdefault(jku, entry.fetched_at)
        while len(sets) > self._max_sets:
            dropped, _ = sets.popitem(last=False)
            self._attempted_at.pop(dropped, None)

    @property
    def cached_sets(self) -> int:
        """How many key sets are cached (all origins)."""
        return sum(len(sets) for sets in self._entries.values())

    async def _fetch(self, jku: str) -> _Entry:
        try:
            async with self._session.get(
                jku,
                timeout=self._timeout,
                allow_redirects=False,
                headers={"Accept": "application/json"},
            ) as response:
                if response.status != 200:
                    raise JwksError(
                        "jwks-unavailable", f"the key set answered HTTP {response.status}"
                    )
                body = await response.content.read(self._max_bytes + 1)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise JwksError(
                "jwks-unavailable", f"fetching the key set failed: {type(exc).__name__}"
            ) from None
        if len(body) > self._max_bytes:
            raise JwksError(
                "jwks-unavailable", f"the key set is larger than {self._max_bytes} bytes"
            )
        return _Entry(keys=_parse_key_set(body), fetched_at=self._clock())


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _parse_key_set(body: bytes) -> dict[str, OKPKey]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise JwksError("jwks-unavailable", "the key set is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError("jwks-unavailable", 'the key set is not a JWKS ({"keys": [...]})')
    keys: dict[str, OKPKey] = {}
    for jwk in document["keys"]:
        if not isinstance(jwk, dict):
            raise JwksError("jwks-unavailable", "the key set holds something that is not a JWK")
        kid = jwk.get("kid")
        key = public_key(jwk)
        if isinstance(kid, str) and kid and key is not None:
            keys[kid] = key  # other key types are ignored: only Ed25519 is ever accepted
    return keys
