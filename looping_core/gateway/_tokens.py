"""Gateway tokens: what a gateway signs for every call it forwards to an agent."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from looping_core.a2a import SigningKey
from looping_core.a2a.internal import SIGNING_ALGORITHM, sign_compact

__all__ = ["mint_token"]


def mint_token(
    private_jwk: Mapping[str, Any],
    *,
    jku: str | None,
    iss: str,
    aud: str | list[str],
    tenant: str | None,
    sub: str | None = "caller",
    lifetime: int = 300,
    now: float | None = None,
    algorithm: str = SIGNING_ALGORITHM,
    header: Mapping[str, Any] | None = None,
    claims: Mapping[str, Any] | None = None,
) -> str:
    """A gateway token signed with `private_jwk`, as a gateway issues it (EdDSA, `jku` its key
    set, `iss` its origin, `aud` the agent's endpoint, `tenant`, `sub`, a short lifetime).

    `None` for `jku`, `tenant` or `sub` leaves that member out; `header` and `claims` add or
    override members (a value of `None` removes one), for tests that need a bad token.
    """
    key = SigningKey.from_jwk(private_jwk)
    issued = int(time.time() if now is None else now)
    protected: dict[str, Any] = {"typ": "JWT", "kid": key.kid, "jku": jku}
    payload: dict[str, Any] = {
        "iss": iss,
        "sub": sub,
        "aud": aud,
        "tenant": tenant,
        "iat": issued,
        "nbf": issued,
        "exp": issued + lifetime,
        "jti": uuid.uuid4().hex,
    }
    protected.update(header or {})
    payload.update(claims or {})
    protected = {k: v for k, v in protected.items() if v is not None}
    payload = {k: v for k, v in payload.items() if v is not None}
    body = json.dumps(payload, separators=(",", ":")).encode()
    return sign_compact(protected, body, key.key, algorithm)
