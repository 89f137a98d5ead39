"""The agent's signing key: generation, loading from the environment, the JWKS with rotation."""

from __future__ import annotations

import datetime
import json

import pytest

from looping_core.a2a._keys import (
    SigningKey,
    SigningKeyError,
    generate_signing_key,
    jwks_document,
    load_signing_key,
)
from looping_core.config import RetiredKey
from looping_core.contract import SecretRef
from looping_core.testing import ed25519_private_jwk, public_jwk_of

REF = SecretRef("LPT_KEY")


def test_generated_keys_are_private_ed25519_jwks_with_a_dated_kid() -> None:
    jwk = generate_signing_key(today=datetime.date(2026, 11, 29))
    assert jwk["kid"] == "a2a-2026-11-29"
    assert (jwk["kty"], jwk["crv"]) == ("OKP", "Ed25519")
    assert set(jwk) == {"kty", "crv", "kid", "x", "d"}
    assert generate_signing_key()["d"] != jwk["d"]


def test_the_public_half_is_derived_never_configured() -> None:
    private = ed25519_private_jwk("k1")
    key = load_signing_key(REF, {"LPT_KEY": json.dumps(private)})
    assert key.public_jwk == {
        "kty": "OKP", "crv": "Ed25519", "x": private["x"], "kid": "k1", "alg": "EdDSA", "use": "sig"
    }  # fmt: skip
    assert "d" not in key.public_jwk
    assert private["d"] not in repr(key)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "the signing key is read from the environment variable LPT_KEY, which is not set"),
        ("not json", "LPT_KEY does not hold a JSON Web Key (JSON)"),
        ("[1]", "LPT_KEY does not hold a JSON Web Key object"),
        (
            '{"kty": "RSA"}',
            'LPT_KEY: the key must be an Ed25519 JWK ("kty": "OKP", "crv": "Ed25519")',
        ),
        ("PUBLIC", 'LPT_KEY: the key must be a private JWK (with "d"); got a public one'),
        ("NO_KID", 'LPT_KEY: the key needs a "kid" (generate one with `looping keys`)'),
        ("BAD_D", "LPT_KEY: the key cannot be imported"),
    ],
)
def test_unusable_keys_are_refused_without_echoing_them(value: str | None, message: str) -> None:
    private = ed25519_private_jwk("k1")
    replacements = {
        "PUBLIC": json.dumps(public_jwk_of(private)),
        "NO_KID": json.dumps({k: v for k, v in private.items() if k != "kid"}),
        "BAD_D": json.dumps(dict(private, d="c2hvcnQ")),
    }
    value = replacements.get(value or "", value)
    environ = {} if value is None else {"LPT_KEY": value}
    with pytest.raises(SigningKeyError) as caught:
        load_signing_key(REF, environ)
    assert str(caught.value).startswith(message)
    assert private["d"] not in str(caught.value)


def test_retired_keys_stay_in_the_jwks_until_their_day() -> None:
    current = SigningKey.from_jwk(ed25519_private_jwk("new"))
    old_x = ed25519_private_jwk("old")["x"]
    retired = [
        RetiredKey(kid="old", x=old_x, until=datetime.date(2026, 12, 31)),
        RetiredKey(kid="older", x=old_x, until=datetime.date(2026, 6, 30)),
    ]
    document = jwks_document(current, retired, today=datetime.date(2026, 12, 31))
    assert [key["kid"] for key in document["keys"]] == ["new", "old"]
    after = jwks_document(current, retired, today=datetime.date(2027, 1, 1))
    assert [key["kid"] for key in after["keys"]] == ["new"]
