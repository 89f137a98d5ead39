"""Every JWS this package signs or verifies goes through here, with the algorithm pinned.

Only EdDSA over Ed25519 is accepted: `EdDSA` (RFC 8037) and its RFC 9864 name `Ed25519`. We sign
with `EdDSA` because the official A2A SDK's verifier (PyJWT) knows only that name; joserfc warns
at every use that RFC 9864 deprecates it. This module's own registry knows `EdDSA` without that
warning (nothing else is changed), so no warning filter is set up per call on the hot path.
"""

from __future__ import annotations

import base64
import functools
import json
import types
from collections.abc import Mapping
from typing import Any

from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwa import EdDSAAlgorithm, JWSAlgModel
from joserfc.jwk import OKPKey
from joserfc.jws import JWSRegistry

ALGORITHMS = ("EdDSA", "Ed25519")
SIGNING_ALGORITHM = "EdDSA"


class _EdDSA(EdDSAAlgorithm):
    """joserfc's EdDSA, without its deprecation warning (we keep the name on purpose)."""

    security_warning = ""  # falsy: joserfc warns only when it is set


class _Registry(JWSRegistry):
    """The two EdDSA names and nothing else: no other algorithm is even known here."""

    algorithms: dict[str, JWSAlgModel] = {  # noqa: RUF012 (joserfc's own class attribute)
        "EdDSA": _EdDSA(),
        "Ed25519": JWSRegistry.algorithms["Ed25519"],
    }


# Not strict about header names: gateways may add their own; `crit` is still enforced.
_REGISTRY = _Registry(algorithms=list(ALGORITHMS), strict_check_header=False)


def sign_compact(
    protected: Mapping[str, Any], payload: bytes, key: OKPKey, algorithm: str = SIGNING_ALGORITHM
) -> str:
    """A compact JWS over `payload`, signed with EdDSA under either of its names."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"only {' or '.join(ALGORITHMS)} may sign here, not {algorithm!r}")
    header = {**protected, "alg": algorithm}
    return jws.serialize_compact(header, payload, key, algorithms=[algorithm], registry=_REGISTRY)


def verify_compact(token: str, key: OKPKey) -> bytes:
    """The payload of `token` if its EdDSA signature verifies with `key`; else `JoseError`."""
    return jws.deserialize_compact(token, key, algorithms=ALGORITHMS, registry=_REGISTRY).payload


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def read_unverified(token: str) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The protected header (read-only) and JSON claims of a compact JWS, *not verified*.

    Used only to decide whether a token may be verified at all (which `jku`, which `iss`) before
    anything is fetched. Raises `ValueError` for anything that is not a compact JWS with JSON
    object header and payload.
    """
    parts = token.split(".")
    if len(parts) != 3 or not all(parts[:2]):
        raise ValueError("not a compact JWS (header.payload.signature)")
    try:
        header = _protected_header(parts[0])
        claims = json.loads(b64url_decode(parts[1]))
    except (ValueError, UnicodeDecodeError):
        raise ValueError("header or payload is not base64url JSON") from None
    if header is None or not isinstance(claims, dict):
        raise ValueError("header and payload must be JSON objects")
    return header, claims


@functools.lru_cache(maxsize=64)
def _protected_header(segment: str) -> Mapping[str, Any] | None:
    """The header segment's JSON object (`None` if it is JSON but no object), parsed once per
    distinct segment: every token one gateway key signs carries the same header, so a request
    does not decode it again. Read-only, since it is shared; the key is the exact text, so no
    other header can get it. Errors are not cached."""
    header = json.loads(b64url_decode(segment))
    return types.MappingProxyType(header) if isinstance(header, dict) else None


def public_key(jwk: Mapping[str, Any]) -> OKPKey | None:
    """An Ed25519 public key from a JWK, or `None` if the JWK is not one."""
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519" or not isinstance(jwk.get("x"), str):
        return None
    try:
        return OKPKey.import_key({"kty": "OKP", "crv": "Ed25519", "x": jwk["x"]})
    except (JoseError, ValueError, TypeError):
        return None
