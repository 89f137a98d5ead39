"""verify_push: what a receiver checks, each with a negative test."""

from __future__ import annotations

import time

import pytest

from looping_core.a2a import SigningKey
from looping_core.a2a._push import (
    SIGNATURE_HEADER,
    MemorySeenPushes,
    PushReplayed,
    PushSignatureError,
    PushSigner,
    verify_push,
)
from looping_core.testing import ed25519_private_jwk

URL = "https://gateway.example/push/inbox"
BODY = b'{"task":{"id":"t1"}}'


@pytest.fixture
def signer() -> PushSigner:
    key = SigningKey.from_jwk(ed25519_private_jwk("agent-1"))
    return PushSigner(
        key=key,
        jwks_url="https://agent.example/.well-known/jwks.json",
        issuer="https://agent.example",
    )


def jwks_of(signer: PushSigner) -> dict:  # type: ignore[type-arg]
    return {"keys": [signer.key.public_jwk]}


def headers(signer: PushSigner, **overrides: object) -> dict[str, str]:
    options = {"url": URL, "task_id": "t1", "jti": "n-1", "body": BODY, **overrides}
    return {SIGNATURE_HEADER: signer.sign(**options)}  # type: ignore[arg-type]


def test_a_genuine_push_verifies(signer: PushSigner) -> None:
    claims = verify_push(headers(signer), BODY, jwks_of(signer), audience=URL)
    assert (claims["taskId"], claims["jti"], claims["aud"], claims["iss"]) == (
        "t1",
        "n-1",
        URL,
        "https://agent.example",
    )


@pytest.mark.parametrize(
    ("case", "check"),
    [
        ("no-header", "signature-missing"),
        ("garbage", "malformed"),
        ("other-body", "body-mismatch"),
        ("other-audience", "audience-mismatch"),
        ("other-key", "unknown-kid"),
        ("same-kid-other-key", "bad-signature"),
        ("expired", "expired"),
        ("future", "not-yet-valid"),
        ("hs256", "algorithm-not-allowed"),
    ],
)
def test_forged_or_stale_pushes_are_refused(signer: PushSigner, case: str, check: str) -> None:
    jwks, body, audience = jwks_of(signer), BODY, URL
    sent = headers(signer)
    if case == "no-header":
        sent = {}
    elif case == "garbage":
        sent = {SIGNATURE_HEADER: "not-a-jwt"}
    elif case == "other-body":
        body = b'{"task":{"id":"t2"}}'
    elif case == "other-audience":
        audience = "https://gateway.example/push/other"
    elif case == "other-key":
        jwks = {"keys": [SigningKey.from_jwk(ed25519_private_jwk("stranger")).public_jwk]}
    elif case == "same-kid-other-key":
        jwks = {"keys": [SigningKey.from_jwk(ed25519_private_jwk("agent-1")).public_jwk]}
    elif case == "expired":
        sent = {
            SIGNATURE_HEADER: signer.sign(
                url=URL, task_id="t1", jti="n", body=BODY, now=time.time() - 3600
            )
        }
    elif case == "future":
        sent = {
            SIGNATURE_HEADER: signer.sign(
                url=URL, task_id="t1", jti="n", body=BODY, now=time.time() + 3600
            )
        }
    elif case == "hs256":
        _, payload, _ = sent[SIGNATURE_HEADER].split(".")
        hs256_header = (
            "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFnZW50LTEifQ"  # {"alg":"HS256","kid":"agent-1"}
        )
        sent = {SIGNATURE_HEADER: f"{hs256_header}.{payload}.c2lnbmF0dXJl"}
    with pytest.raises(PushSignatureError) as caught:
        verify_push(sent, body, jwks, audience=audience)
    assert caught.value.check == check


def test_a_retried_push_is_told_apart_by_its_jti(signer: PushSigner) -> None:
    """A retry is signed anew (new iat/exp) with the same jti: `seen` recognizes it."""
    seen = MemorySeenPushes()
    verify_push(headers(signer), BODY, jwks_of(signer), audience=URL, seen=seen)
    with pytest.raises(PushReplayed) as replayed:
        verify_push(headers(signer), BODY, jwks_of(signer), audience=URL, seen=seen)
    assert replayed.value.claims["jti"] == "n-1"
    other = verify_push(headers(signer, jti="n-2"), BODY, jwks_of(signer), seen=seen)
    assert other["jti"] == "n-2"


def test_a_forged_push_is_not_remembered(signer: PushSigner) -> None:
    """Only verified pushes enter the store: a forgery cannot block the genuine one."""
    seen = MemorySeenPushes()
    forged = SigningKey.from_jwk(ed25519_private_jwk("agent-1"))
    forger = PushSigner(key=forged, jwks_url=signer.jwks_url, issuer=signer.issuer)
    with pytest.raises(PushSignatureError):
        verify_push(headers(forger), BODY, jwks_of(signer), seen=seen)
    assert len(seen) == 0
    verify_push(headers(signer), BODY, jwks_of(signer), seen=seen)


def test_a_discarded_jti_is_processed_again(signer: PushSigner) -> None:
    seen = MemorySeenPushes()
    verify_push(headers(signer), BODY, jwks_of(signer), seen=seen)
    seen.discard("n-1")  # processing failed; the retry must be processed
    verify_push(headers(signer), BODY, jwks_of(signer), seen=seen)


def test_seen_jtis_expire_and_are_capped() -> None:
    now = [0.0]
    seen = MemorySeenPushes(retain_seconds=10, max_entries=3, clock=lambda: now[0])
    assert [seen.add(jti) for jti in ("a", "b", "a")] == [True, True, False]
    now[0] = 11
    assert seen.add("a") is True  # forgotten after its retention
    for jti in ("c", "d", "e"):
        seen.add(jti)
    assert len(seen) == 3
    assert seen.add("e") is False
    assert seen.add("a") is True  # pushed out by the cap
