"""Verifying the gateway's token on every call: four checks in a fixed order, then the claims.

1. `jku` is present in the protected header;
2. the `jku` origin is on the gateway allowlist, checked *before any fetch* (exact
   scheme+host+port; userinfo, fragments and other schemes refused);
3. the `iss` origin equals the `jku` origin;
4. the signature verifies with the algorithm pinned to EdDSA (`EdDSA` or `Ed25519`; never `none`,
   HMAC or anything else) and a key fetched from `jku`.

Then `aud` equals this endpoint's URL; the `tenant` claim is present and equals the request's
tenant; `exp`, `nbf` and `iat` hold within a small leeway, and `exp - iat` is at most the
policy's `max_lifetime_seconds`; `sub` is present. Each failure names its
check. There is no bypass.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import attrs
from joserfc.errors import JoseError

from looping_core._origins import origin_of
from looping_core.a2a._jose import ALGORITHMS, read_unverified, verify_compact
from looping_core.a2a._jwks import JwksCache, JwksError
from looping_core.contract import Identity
from looping_core.errors import CheckFailed

__all__ = [
    "GatewayToken",
    "TokenPolicy",
    "TokenRejected",
    "check_gateway_token",
    "normalize_origins",
    "origin_of",
    "verify_gateway_token",
]


class TokenRejected(CheckFailed):
    """The token failed `check` (a stable name such as `jku-not-allowed`) for `reason`."""

    subject = "gateway token"


def normalize_origins(origins: Iterable[str]) -> frozenset[str]:
    """The allowlist as `origin_of` spells origins (entries that are not origins are dropped)."""
    return frozenset(o for o in (origin_of(origin) for origin in origins) if o is not None)


@attrs.frozen
class TokenPolicy:
    """What a valid token must say: our endpoint, trusted gateway origins, clock leeway."""

    endpoint: str
    gateway_origins: frozenset[str] = attrs.field(converter=normalize_origins)
    leeway_seconds: int = 30
    max_lifetime_seconds: int = 3600
    """The longest `exp - iat` accepted: a token that lasts for years is a stolen key's gift."""


@attrs.frozen
class GatewayToken:
    """A verified gateway token: who calls, and until when (`exp`) the token holds."""

    identity: Identity
    expires: float


async def verify_gateway_token(
    token: str,
    *,
    tenant: str,
    policy: TokenPolicy,
    jwks: JwksCache,
    now: float | None = None,
) -> Identity:
    """Verify `token` for a request to `tenant`; raise `TokenRejected` naming the check."""
    verified = await check_gateway_token(token, tenant=tenant, policy=policy, jwks=jwks, now=now)
    return verified.identity


async def check_gateway_token(
    token: str,
    *,
    tenant: str | None,
    policy: TokenPolicy,
    jwks: JwksCache,
    now: float | None = None,
) -> GatewayToken:
    """`verify_gateway_token`, parsing the token once. `tenant` `None`: the request names none,
    so every check but the tenant's is made, against the tenant the token claims."""
    try:
        header, claims = read_unverified(token)
    except ValueError as exc:
        raise TokenRejected("malformed", str(exc)) from None

    jku = header.get("jku")
    if not isinstance(jku, str) or not jku:
        raise TokenRejected("jku-missing", "the protected header has no jku")
    jku_origin = origin_of(jku)
    if jku_origin is None:
        raise TokenRejected(
            "jku-not-allowed", "jku is not a plain http(s) URL (userinfo, fragment or scheme)"
        )
    if jku_origin not in policy.gateway_origins:
        raise TokenRejected("jku-not-allowed", "the jku origin is not on the gateway allowlist")

    issuer = claims.get("iss")
    if not isinstance(issuer, str) or origin_of(issuer) != jku_origin:
        raise TokenRejected("issuer-mismatch", "the iss origin differs from the jku origin")

    if header.get("alg") not in ALGORITHMS:
        raise TokenRejected("algorithm-not-allowed", "only EdDSA (Ed25519) tokens are accepted")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise TokenRejected("unknown-kid", "the protected header has no kid")
    try:
        key = await jwks.key(jku, kid)
    except JwksError as exc:
        raise TokenRejected(exc.check, exc.reason) from None
    try:
        # The claims checked from here on are the verified payload's, not the parse above.
        verified = json.loads(verify_compact(token, key))
    except (JoseError, ValueError):
        raise TokenRejected("bad-signature", "the signature does not verify") from None
    if not isinstance(verified, dict):
        raise TokenRejected("claims-invalid", "the payload is not a JSON object")

    if tenant is None:
        claimed = verified.get("tenant")
        tenant = claimed if isinstance(claimed, str) else ""
    moment = time.time() if now is None else now
    identity = _check_claims(verified, tenant, policy, moment)
    return GatewayToken(identity=identity, expires=float(verified["exp"]))


def _check_claims(claims: dict[str, Any], tenant: str, policy: TokenPolicy, now: float) -> Identity:
    audience = claims.get("aud")
    if audience not in (policy.endpoint, [policy.endpoint]):
        raise TokenRejected("audience-mismatch", "aud is not this endpoint's URL")

    token_tenant = claims.get("tenant")
    if not isinstance(token_tenant, str) or not token_tenant:
        raise TokenRejected("tenant-missing", "the token has no tenant claim")
    if token_tenant != tenant:
        raise TokenRejected("tenant-mismatch", "the token is for another tenant than params.tenant")

    leeway = policy.leeway_seconds
    expires = _number(claims, "exp", required=True)
    if expires is not None and now > expires + leeway:
        raise TokenRejected("expired", "the token has expired")
    not_before = _number(claims, "nbf", required=False)
    if not_before is not None and now < not_before - leeway:
        raise TokenRejected("not-yet-valid", "the token is not valid yet (nbf)")
    issued = _number(claims, "iat", required=True)
    if issued is not None and now < issued - leeway:
        raise TokenRejected("not-yet-valid", "the token was issued in the future (iat)")
    if (
        expires is not None
        and issued is not None
        and expires - issued > policy.max_lifetime_seconds
    ):
        raise TokenRejected(
            "lifetime-too-long",
            f"the token lasts longer than {policy.max_lifetime_seconds} s (exp - iat)",
        )

    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise TokenRejected("subject-missing", "the token has no sub")
    return Identity(tenant=token_tenant, issuer=str(claims["iss"]), subject=subject)


def _number(claims: dict[str, Any], name: str, *, required: bool) -> float | None:
    value = claims.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenRejected("claims-invalid", f"{name} must be a NumericDate")
    return float(value)
