"""The JWKS cache against a real key server: TTL, refetch limits, shared fetches, bad key sets."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from looping_core.a2a._jwks import JwksCache, JwksError
from looping_core.testing import FakeGateway


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
def clock() -> Clock:
    return Clock()


def cache_for(session: aiohttp.ClientSession, clock: Clock, **options: float) -> JwksCache:
    settings = {"ttl": 300.0, "refetch_interval": 30.0, "timeout": 2.0, **options}
    return JwksCache(session, clock=clock, **settings)  # type: ignore[arg-type]


async def test_keys_are_cached_until_the_ttl(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    cache = cache_for(session, clock)
    kid = gateway.public_jwk["kid"]
    await cache.key(gateway.jwks_url, kid)
    clock.now += 299
    await cache.key(gateway.jwks_url, kid)
    assert gateway.jwks_fetches == 1
    clock.now += 2
    await cache.key(gateway.jwks_url, kid)
    assert gateway.jwks_fetches == 2


async def test_an_unknown_kid_refetches_once_per_interval_then_is_refused(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    cache = cache_for(session, clock)
    await cache.key(gateway.jwks_url, gateway.public_jwk["kid"])
    clock.now += 31
    with pytest.raises(JwksError) as first:
        await cache.key(gateway.jwks_url, "rotated-in-later")
    assert first.value.check == "unknown-kid"
    assert gateway.jwks_fetches == 2  # one refetch
    for attempt in range(100):
        with pytest.raises(JwksError):
            await cache.key(gateway.jwks_url, f"random-{attempt}")
    assert gateway.jwks_fetches == 2  # and no more within the interval


async def test_a_rotated_key_is_found_by_the_refetch(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    cache = cache_for(session, clock)
    await cache.key(gateway.jwks_url, gateway.public_jwk["kid"])
    rotated = dict(gateway.public_jwk, kid="rotated")
    gateway.jwks_body = json.dumps({"keys": [gateway.public_jwk, rotated]}).encode()
    clock.now += 31
    assert await cache.key(gateway.jwks_url, "rotated") is not None


async def test_concurrent_requests_share_one_fetch(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    cache = cache_for(session, clock)
    gateway.jwks_delay = 0.05  # keep the fetch in flight while the others arrive
    kid = gateway.public_jwk["kid"]
    keys = await asyncio.gather(*(cache.key(gateway.jwks_url, kid) for _ in range(50)))
    assert len(keys) == 50
    assert gateway.jwks_fetches == 1


async def test_a_burst_of_unknown_kids_on_a_cold_cache_costs_one_fetch(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    cache = cache_for(session, clock)
    gateway.jwks_delay = 0.05
    results = await asyncio.gather(
        *(cache.key(gateway.jwks_url, f"random-{i}") for i in range(100)), return_exceptions=True
    )
    assert all(isinstance(result, JwksError) for result in results)
    assert gateway.jwks_fetches == 1


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (b"<html>not json</html>", 200, "the key set is not JSON"),
        (b'{"keys": "nope"}', 200, 'the key set is not a JWKS ({"keys": [...]})'),
        (b'["keys"]', 200, 'the key set is not a JWKS ({"keys": [...]})'),
        (b'{"keys": ["not a jwk"]}', 200, "the key set holds something that is not a JWK"),
        (b"{}", 500, "the key set answered HTTP 500"),
    ],
)
async def test_bad_key_sets_are_refused(
    gateway: FakeGateway,
    session: aiohttp.ClientSession,
    clock: Clock,
    body: bytes,
    status: int,
    reason: str,
) -> None:
    gateway.jwks_body, gateway.jwks_status = body, status
    with pytest.raises(JwksError) as caught:
        await cache_for(session, clock).key(gateway.jwks_url, gateway.public_jwk["kid"])
    assert caught.value.check == "jwks-unavailable"
    assert caught.value.reason == "the gateway's key set could not be fetched recently"
    with pytest.raises(JwksError) as fetched:
        await cache_for(session, clock)._fetch(gateway.jwks_url)
    assert fetched.value.reason == reason


async def test_a_failing_key_server_is_not_hammered(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    gateway.jwks_status = 503
    cache = cache_for(session, clock)
    for _ in range(20):
        with pytest.raises(JwksError):
            await cache.key(gateway.jwks_url, gateway.public_jwk["kid"])
    assert gateway.jwks_fetches == 1
    gateway.jwks_status = 200
    clock.now += 31
    assert await cache.key(gateway.jwks_url, gateway.public_jwk["kid"]) is not None


async def test_an_oversized_key_set_is_refused(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    padding = [dict(gateway.public_jwk, kid=f"k{i}") for i in range(2000)]
    gateway.jwks_body = json.dumps({"keys": padding}).encode()
    with pytest.raises(JwksError) as caught:
        await cache_for(session, clock, max_bytes=64 * 1024)._fetch(gateway.jwks_url)
    assert caught.value.reason == "the key set is larger than 65536 bytes"


async def test_a_slow_key_server_times_out(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    gateway.jwks_delay = 1.0
    with pytest.raises(JwksError) as caught:
        await cache_for(session, clock, timeout=0.1)._fetch(gateway.jwks_url)
    assert caught.value.reason == "fetching the key set failed: TimeoutError"


async def test_redirects_are_not_followed(
    gateway: FakeGateway,
    other_gateway: FakeGateway,
    session: aiohttp.ClientSession,
    clock: Clock,
) -> None:
    gateway.jwks_redirect = other_gateway.jwks_url
    with pytest.raises(JwksError) as caught:
        await cache_for(session, clock)._fetch(gateway.jwks_url)
    assert caught.value.reason == "the key set answered HTTP 302"
    assert other_gateway.jwks_fetches == 0


async def test_keys_of_other_types_are_ignored(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    rsa_like = {"kty": "RSA", "kid": "rsa", "n": "AQAB", "e": "AQAB"}
    gateway.jwks_body = json.dumps({"keys": [rsa_like, gateway.public_jwk]}).encode()
    cache = cache_for(session, clock)
    await cache.key(gateway.jwks_url, gateway.public_jwk["kid"])
    with pytest.raises(JwksError) as caught:
        await cache.key(gateway.jwks_url, "rsa")
    assert caught.value.check == "unknown-kid"


async def test_a_request_arriving_as_the_first_fetch_completes_gets_the_key(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    """Regression: the in-flight fetch was retired one loop step before its keys were stored,
    so a request arriving in that gap was refused `jwks-unavailable` with a valid kid."""
    cache = cache_for(session, clock)
    kid = gateway.public_jwk["kid"]

    outcomes: list[str] = []

    def arrive_now(_: object) -> None:
        """A request arriving right when the fetch completes, before anyone resumes: its
        coroutine runs synchronously here, as far as it can without waiting."""
        request = cache.key(gateway.jwks_url, kid)
        try:
            request.send(None)
        except StopIteration:
            outcomes.append("ok")
        except JwksError as exc:
            outcomes.append(exc.check)
        else:
            request.close()
            outcomes.append("waited")

    first = asyncio.create_task(cache.key(gateway.jwks_url, kid))
    await asyncio.sleep(0)
    (fetch,) = cache._in_flight.values()  # white box: the one moment that matters
    fetch.add_done_callback(arrive_now)
    await first
    assert outcomes == ["ok"]
    assert gateway.jwks_fetches == 1


async def test_fresh_urls_on_an_allowed_origin_cost_one_fetch_per_interval_and_keep_little(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    """A flood of key set URLs a caller made up on an allowed origin (fresh queries, here on
    the gateway's real key set, so each one even answers a valid set): one fetch per interval
    for the whole origin, and at most `max_sets_per_origin` key sets kept, nothing per URL."""
    cache = cache_for(session, clock, ttl=10_000)  # no refetch of the known set meanwhile
    kid = gateway.public_jwk["kid"]
    await cache.key(gateway.jwks_url, kid)  # the gateway's own key set, known
    for attempt in range(1000):
        with contextlib.suppress(JwksError):
            await cache.key(f"{gateway.jwks_url}?fresh={attempt}", kid)
    assert gateway.jwks_fetches == 1  # the origin's new-URL fetch of this interval was that one
    for minute in range(10):  # then one made-up URL per interval, beside the gateway's traffic
        clock.now += 31
        await cache.key(gateway.jwks_url, kid)  # cached: no fetch
        for attempt in range(100):
            with contextlib.suppress(JwksError):
                await cache.key(f"{gateway.jwks_url}?later={minute}-{attempt}", kid)
    assert gateway.jwks_fetches == 11
    assert cache.cached_sets == 4  # the bound, whatever was asked for
    assert len(cache._attempted_at) == 4  # nothing kept per URL beyond the sets themselves
    fetches = gateway.jwks_fetches
    assert await cache.key(gateway.jwks_url, kid) is not None  # kept: the most used set
    assert gateway.jwks_fetches == fetches


async def test_a_flood_of_new_urls_never_delays_a_known_gateways_refetch(
    gateway: FakeGateway, session: aiohttp.ClientSession, clock: Clock
) -> None:
    cache = cache_for(session, clock)
    await cache.key(gateway.jwks_url, gateway.public_jwk["kid"])
    clock.now += 31
    with contextlib.suppress(JwksError):  # uses this interval's fetch of a new URL
        await cache.key(f"{gateway.jwks_url}?fresh=1", "x")
    rotated = dict(gateway.public_jwk, kid="rotated")
    gateway.jwks_body = json.dumps({"keys": [gateway.public_jwk, rotated]}).encode()
    assert await cache.key(gateway.jwks_url, "rotated") is not None  # its own budget
