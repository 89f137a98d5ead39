"""Push notifications as the protocol has them: signing and verifying (delivery from the durable
outbox is the runner's, `looping_core.runner.PushDeliverer`).

Each delivery is a `POST` of a `StreamResponse` (`application/a2a+json`) to the configured URL,
with the configured `Authorization`, the `X-A2A-Notification-Token`, and the agent's own
signature in `X-A2A-Notification-Signature`: a JWT (EdDSA, `kid`, `jku` = the agent's JWKS) whose
claims bind it to the receiver (`aud` = the push URL), the task (`taskId`), the body
(`body_sha256`) and the notification (`jti`, the same on every retry so receivers can drop
duplicates). `verify_push` is the receiver's side.
"""

from __future__ import annotations

import collections
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
from joserfc.errors import JoseError

from looping_core.a2a._jose import (
    ALGORITHMS,
    b64url,
    public_key,
    read_unverified,
    sign_compact,
    verify_compact,
)
from looping_core.a2a._keys import SigningKey
from looping_core.errors import CheckFailed, LoopingError

__all__ = [
    "SIGNATURE_HEADER",
    "TOKEN_HEADER",
    "MemorySeenPushes",
    "PushReplayed",
    "PushSignatureError",
    "PushSigner",
    "SeenPushes",
    "verify_push",
]

SIGNATURE_HEADER = "X-A2A-Notification-Signature"
TOKEN_HEADER = "X-A2A-Notification-Token"
CONTENT_TYPE = "application/a2a+json"
SIGNATURE_LIFETIME = 300


class PushSignatureError(CheckFailed):
    """A push's signature does not hold (`check` names which part)."""

    subject = "push signature"


class PushReplayed(LoopingError):
    """A verified push whose `jti` was seen before: a retry of a notification already received
    (delivery is at least once). Answer it 2xx, so the agent stops retrying, and drop it."""

    def __init__(self, claims: Mapping[str, Any]) -> None:
        self.claims = dict(claims)
        super().__init__(f"push {claims.get('jti')} was already received")


class SeenPushes(Protocol):
    """Where a receiver remembers the `jti`s of pushes it received (see `verify_push`).

    A receiver with several processes, or that must drop repeats across its own restarts, backs
    this with its database (an insert into a table with a unique `jti`, say).
    """

    def add(self, jti: str) -> bool:
        """Remember `jti`; `True` if it is new, `False` if it was seen before."""

    def discard(self, jti: str) -> None:
        """Forget `jti` (its processing failed, so its retry must be processed)."""


class MemorySeenPushes:
    """`SeenPushes` in this process's memory: at most `max_entries` jtis, each kept for
    `retain_seconds` (at least the sender's `[push] max_age_seconds`, a day by default, over
    which it retries one notification)."""

    def __init__(
        self,
        *,
        retain_seconds: float = 86_400 + 3_600,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._retain = retain_seconds
        self._max = max_entries
        self._clock = clock
        self._seen: collections.OrderedDict[str, float] = collections.OrderedDict()

    def add(self, jti: str) -> bool:
        now = self._clock()
        while self._seen and next(iter(self._seen.values())) <= now:
            self._seen.popitem(last=False)  # expired (oldest first: one retention for all)
        if jti in self._seen:
            return False
        while len(self._seen) >= self._max:
            self._seen.popitem(last=False)
        self._seen[jti] = now + self._retain
        return True

    def discard(self, jti: str) -> None:
        self._seen.pop(jti, None)

    def __len__(self) -> int:
        return len(self._seen)


def body_digest(body: bytes) -> str:
    return b64url(hashlib.sha256(body).digest())


@attrs.frozen
class PushSigner:
    """Signs pushes as this agent: its key, its JWKS URL (`jku`) and its base URL (`iss`)."""

    key: SigningKey
    jwks_url: str
    issuer: str

    def sign(
        self, *, url: str, task_id: str, jti: str, body: bytes, now: float | None = None
    ) -> str:
        issued = int(time.time() if now is None else now)
        claims = {
            "iss": self.issuer,
            "aud": url,
            "iat": issued,
            "exp": issued + SIGNATURE_LIFETIME,
            "jti": jti,
            "taskId": task_id,
            "body_sha256": body_digest(body),
        }
        header = {"typ": "JWT", "kid": self.key.kid, "jku": self.jwks_url}
        return sign_compact(
            header, json.dumps(claims, separators=(",", ":")).encode(), self.key.key
        )


def verify_push(
    headers: Mapping[str, str],
    body: bytes,
    jwks: Mapping[str, Any],
    *,
    audience: str | None = None,
    leeway: int = 30,
    now: float | None = None,
    seen: SeenPushes | None = None,
) -> dict[str, Any]:
    """Verify a received push against the agent's JWKS; return its claims.

    Checks: EdDSA only; a `kid` in `jwks`; the signature; `body_sha256` equals the body's hash;
    `exp`/`iat`; `aud` equals `audience` when given (the URL the receiver is reachable at).

    Delivery is at least once: a push re-sent after a crash or a lost answer carries the same
    `jti`. With `seen`, a verified push whose `jti` was seen raises `PushReplayed` (answer it 2xx
    and drop it); a new one is remembered. If processing it then fails, `seen.discard(jti)`
    before answering an error, so that the retry is processed.
    """
    token = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER.lower()), None)
    if not token:
        raise PushSignatureError("signature-missing", f"no {SIGNATURE_HEADER} header")
    try:
        header, _ = read_unverified(token)
    except ValueError as exc:
        raise PushSignatureError("malformed", str(exc)) from None
    if header.get("alg") not in ALGORITHMS:
        raise PushSignatureError("algorithm-not-allowed", "only EdDSA signatures are accepted")
    keys = {jwk.get("kid"): jwk for jwk in jwks.get("keys", []) if isinstance(jwk, dict)}
    key = public_key(keys.get(header.get("kid"), {}))
    if key is None:
        raise PushSignatureError("unknown-kid", "the signing key is not in the agent's JWKS")
    try:
        claims = json.loads(verify_compact(token, key))
    except (JoseError, ValueError):
        raise PushSignatureError("bad-signature", "the signature does not verify") from None
    if claims.get("body_sha256") != body_digest(body):
        raise PushSignatureError("body-mismatch", "the body is not the one that was signed")
    moment = time.time() if now is None else now
    if not isinstance(claims.get("exp"), int | float) or moment > claims["exp"] + leeway:
        raise PushSignatureError("expired", "the signature has expired")
    if not isinstance(claims.get("iat"), int | float) or moment < claims["iat"] - leeway:
        raise PushSignatureError("not-yet-valid", "the signature was issued in the future")
    if audience is not None and claims.get("aud") != audience:
        raise PushSignatureError("audience-mismatch", "the push was signed for another URL")
    for name in ("jti", "taskId", "iss"):
        if not isinstance(claims.get(name), str) or not claims[name]:
            raise PushSignatureError("claims-invalid", f"the {name} claim is missing")
    if seen is not None and not seen.add(claims["jti"]):
        raise PushReplayed(claims)
    result: dict[str, Any] = claims
    return result
