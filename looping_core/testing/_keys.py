"""Real Ed25519 keys for tests: generated fresh, never checked in."""

from __future__ import annotations

from typing import Any

from looping_core.a2a import SigningKey, generate_signing_key

__all__ = ["ed25519_private_jwk", "public_jwk_of"]


def ed25519_private_jwk(kid: str = "test-key") -> dict[str, Any]:
    """A new private Ed25519 JWK (`kty`, `crv`, `kid`, `x`, `d`)."""
    return generate_signing_key(kid)


def public_jwk_of(private_jwk: dict[str, Any]) -> dict[str, Any]:
    """The public JWK for a private one, as a JWKS would publish it."""
    return SigningKey.from_jwk(private_jwk).public_jwk
