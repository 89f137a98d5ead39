"""Every check of the gateway token has a negative test; where it matters, nothing is fetched."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OctKey

from looping_core.a2a import SigningKey
from looping_core.a2a._jose import (
    b64url,
    b64url_decode,
    public_key,
    read_unverified,
    sign_compact,
    verify_compact,
)
from looping_core.testing import FakeGateway, ed25519_private_jwk, make_gateway_token

from support.serving import RunningAgent, start_agent


async def extended_card(agent: RunningAgent, token: str | None, tenant: str = "alice") -> tuple:
    return await agent.rpc("GetExtendedAgentCard", {"tenant": tenant}, token=token)


def assert_refused(result: tuple, check: str) -> None:
    status, headers, body = result
    assert status == 401, body
    assert body["error"]["code"] == -32000
    assert body["error"]["message"] == f"Gateway token rejected: {check}"
    assert body["error"]["data"][0]["metadata"] == {"check": check}
    assert body["error"]["data"][0]["reason"] == "UNAUTHENTICATED"
    assert headers["WWW-Authenticate"] == (
        f'Bearer realm="a2a", error="invalid_token", error_description="{check}"'
    )
    assert "result" not in body


async def test_a_valid_token_is_accepted(agent: RunningAgent, gateway: FakeGateway) -> None:
    status, _, body = await extended_card(agent, gateway.token(tenant="alice", aud=agent.endpoint))
    assert status == 200, body
    assert body["result"]["name"] == "Alice"
    assert gateway.jwks_fetches == 1


async def test_the_rfc_9864_algorithm_name_is_accepted(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, algorithm="Ed25519")
    status, _, _ = await extended_card(agent, token)
    assert status == 200


async def test_no_token(agent: RunningAgent, gateway: FakeGateway) -> None:
    status, headers, body = await extended_card(agent, None)
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="a2a"'
    assert body["error"]["data"][0]["metadata"] == {"check": "token-missing"}
    assert gateway.jwks_fetches == 0


async def test_not_a_jws(agent: RunningAgent, gateway: FakeGateway) -> None:
    assert_refused(await extended_card(agent, "not.a-token"), "malformed")
    assert gateway.jwks_fetches == 0


async def test_check_1_jku_missing(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, jku=None)
    assert_refused(await extended_card(agent, token), "jku-missing")
    assert gateway.jwks_fetches == 0


async def test_check_2_unlisted_jku_fetches_nothing_anywhere(
    agent: RunningAgent, gateway: FakeGateway, other_gateway: FakeGateway
) -> None:
    token = other_gateway.token(tenant="alice", aud=agent.endpoint)
    assert_refused(await extended_card(agent, token), "jku-not-allowed")
    assert other_gateway.jwks_fetches == 0
    assert gateway.jwks_fetches == 0


@pytest.mark.parametrize(
    "jku_of",
    [
        pytest.param(
            lambda o: o.replace("http://", "http://user@") + "/.well-known/jwks.json", id="userinfo"
        ),
        pytest.param(
            lambda o: o.replace("http://", "http://127.0.0.1@") + "/jwks", id="userinfo-host"
        ),
        pytest.param(
            lambda o: o.replace("127.0.0.1", "127.0.0.1.nip.example") + "/jwks",
            id="lookalike-suffix",
        ),
        pytest.param(
            lambda o: o.replace("127.0.0.1", "localhost") + "/jwks", id="other-host-same-port"
        ),
        pytest.param(lambda o: o.replace("http://", "https://") + "/jwks", id="other-scheme"),
        pytest.param(lambda o: o + "/.well-known/jwks.json#frag", id="fragment"),
        pytest.param(lambda o: o.rsplit(":", 1)[0] + ":1/jwks", id="other-port"),
    ],
)
async def test_check_2_lookalike_jku_is_refused_before_any_fetch(
    agent: RunningAgent, gateway: FakeGateway, jku_of
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, jku=jku_of(gateway.origin))
    assert_refused(await extended_card(agent, token), "jku-not-allowed")
    assert gateway.jwks_fetches == 0


async def test_check_2_non_http_jku_is_refused_before_any_fetch(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    # joserfc will not sign a header whose jku is no URL, so the header is swapped after signing;
    # the check comes before the signature's, so the refusal proves the order as well.
    header, payload, signature = gateway.token(tenant="alice", aud=agent.endpoint).split(".")
    fields = json.loads(b64url_decode(header))
    fields["jku"] = "file:///etc/passwd"
    token = f"{b64url(json.dumps(fields).encode())}.{payload}.{signature}"
    assert_refused(await extended_card(agent, token), "jku-not-allowed")
    assert gateway.jwks_fetches == 0


async def test_check_3_issuer_of_another_allowlisted_origin(
    gateway: FakeGateway, other_gateway: FakeGateway
) -> None:
    agent, runner = await start_agent([gateway.origin, other_gateway.origin])
    try:
        token = gateway.token(tenant="alice", aud=agent.endpoint, iss=other_gateway.origin)
        assert_refused(await extended_card(agent, token), "issuer-mismatch")
        assert gateway.jwks_fetches == other_gateway.jwks_fetches == 0
        good = other_gateway.token(tenant="alice", aud=agent.endpoint)
        assert (await extended_card(agent, good))[0] == 200  # both really are allowlisted
    finally:
        await agent.session.close()
        await runner.cleanup()


def _claims(agent: RunningAgent, gateway: FakeGateway) -> dict:
    now = int(time.time())
    return {"iss": gateway.origin, "sub": "caller", "aud": agent.endpoint, "tenant": "alice",
            "iat": now, "exp": now + 300}  # fmt: skip


def _header(gateway: FakeGateway, alg: str) -> dict:
    return {"alg": alg, "kid": gateway.public_jwk["kid"], "jku": gateway.jwks_url}


async def test_check_4_alg_none(agent: RunningAgent, gateway: FakeGateway) -> None:
    header = b64url(json.dumps(_header(gateway, "none")).encode())
    payload = b64url(json.dumps(_claims(agent, gateway)).encode())
    assert_refused(await extended_card(agent, f"{header}.{payload}."), "algorithm-not-allowed")
    assert gateway.jwks_fetches == 0


async def test_check_4_hs256_signed_with_the_public_key_bytes(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    # The classic confusion attack: HMAC keyed with what the verifier knows as the public key.
    public_bytes = b64url_decode(gateway.public_jwk["x"])
    token = jws.serialize_compact(
        _header(gateway, "HS256"),
        json.dumps(_claims(agent, gateway)).encode(),
        OctKey.import_key(public_bytes),
        algorithms=["HS256"],
    )
    assert_refused(await extended_card(agent, token), "algorithm-not-allowed")
    assert gateway.jwks_fetches == 0


async def test_check_4_es256(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = jws.serialize_compact(
        _header(gateway, "ES256"),
        json.dumps(_claims(agent, gateway)).encode(),
        ECKey.generate_key("P-256"),
        algorithms=["ES256"],
    )
    assert_refused(await extended_card(agent, token), "algorithm-not-allowed")
    assert gateway.jwks_fetches == 0


async def test_check_4_bad_signature(agent: RunningAgent, gateway: FakeGateway) -> None:
    impostor = ed25519_private_jwk(kid=gateway.public_jwk["kid"])  # same kid, other key
    token = make_gateway_token(
        impostor, jku=gateway.jwks_url, iss=gateway.origin, aud=agent.endpoint, tenant="alice"
    )
    assert_refused(await extended_card(agent, token), "bad-signature")


async def test_check_4_tampered_claims(agent: RunningAgent, gateway: FakeGateway) -> None:
    header, payload, signature = gateway.token(tenant="bob", aud=agent.endpoint).split(".")
    claims = json.loads(b64url_decode(payload))
    claims["tenant"] = "alice"
    forged = f"{header}.{b64url(json.dumps(claims).encode())}.{signature}"
    assert_refused(await extended_card(agent, forged), "bad-signature")


async def test_unknown_kid_is_refused(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, header={"kid": "no-such-kid"})
    assert_refused(await extended_card(agent, token), "unknown-kid")
    assert gateway.jwks_fetches == 1


async def test_a_burst_of_100_unknown_kids_costs_at_most_one_fetch(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    tokens = [
        gateway.token(tenant="alice", aud=agent.endpoint, header={"kid": f"random-{i}"})
        for i in range(100)
    ]
    results = await asyncio.gather(*(extended_card(agent, token) for token in tokens))
    assert {result[0] for result in results} == {401}
    assert gateway.jwks_fetches == 1


async def test_aud_that_is_only_the_origin(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.base_url)
    assert_refused(await extended_card(agent, token), "audience-mismatch")


async def test_aud_listing_other_audiences_too(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=[agent.endpoint, "https://elsewhere.example/a2a"])
    assert_refused(await extended_card(agent, token), "audience-mismatch")


async def test_missing_tenant_claim_is_never_a_wildcard(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant=None, aud=agent.endpoint)
    assert_refused(await extended_card(agent, token), "tenant-missing")


async def test_token_for_tenant_a_used_for_tenant_b(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    assert_refused(await extended_card(agent, token, tenant="bob"), "tenant-mismatch")


async def test_expired(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, now=time.time() - 3600)
    assert_refused(await extended_card(agent, token), "expired")


async def test_expiry_within_the_leeway_is_accepted(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, now=time.time() - 310)
    assert (await extended_card(agent, token))[0] == 200  # expired 10 s ago, leeway is 30 s


async def test_not_yet_valid(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, now=time.time() + 600)
    assert_refused(await extended_card(agent, token), "not-yet-valid")


async def test_a_token_that_lasts_ten_years_is_refused(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, lifetime=10 * 365 * 86400)
    assert_refused(await extended_card(agent, token), "lifetime-too-long")


async def test_a_token_of_the_longest_lifetime_is_accepted(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, lifetime=3600)
    assert (await extended_card(agent, token))[0] == 200
    longer = gateway.token(tenant="alice", aud=agent.endpoint, lifetime=3601)
    assert_refused(await extended_card(agent, longer), "lifetime-too-long")


async def test_missing_exp(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, claims={"exp": None})
    assert_refused(await extended_card(agent, token), "claims-invalid")


async def test_missing_sub(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint, sub=None)
    assert_refused(await extended_card(agent, token), "subject-missing")


async def test_refusals_are_logged_with_the_check_but_never_the_token(
    agent: RunningAgent, gateway: FakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    token = gateway.token(tenant="alice", aud=agent.base_url)
    with caplog.at_level(logging.WARNING, logger="looping_core.server"):
        await extended_card(agent, token)
    assert "check=audience-mismatch" in caplog.text
    assert token not in caplog.text
    assert token.split(".")[2] not in caplog.text


@pytest.mark.parametrize("alg", ["HS256", "none"])
def test_the_jws_layer_itself_knows_only_eddsa(alg: str) -> None:
    """Behind the alg check of every caller, the JWS layer refuses any other algorithm on its
    own (its registry knows the two EdDSA names only), and an EdDSA token verifies without a
    warning (the suite turns warnings into errors)."""
    gateway_key = SigningKey.from_jwk(ed25519_private_jwk("gw"))
    public = public_key(gateway_key.public_jwk)
    assert public is not None
    payload = b'{"sub":"x"}'
    if alg == "none":
        forged = f"{b64url(json.dumps({'alg': 'none'}).encode())}.{b64url(payload)}."
    else:  # HMAC keyed with the public key's bytes: the classic confusion
        oct_key = OctKey.import_key(b64url_decode(gateway_key.public_jwk["x"]))
        forged = jws.serialize_compact({"alg": "HS256"}, payload, oct_key, algorithms=["HS256"])
    with pytest.raises(JoseError):
        verify_compact(forged, public)
    assert verify_compact(sign_compact({}, payload, gateway_key.key), public) == payload


def test_a_header_is_parsed_once_and_no_other_header_gets_that_parse() -> None:
    """Tokens of one gateway key share their header: it is decoded once, shared read-only, and
    only a token with that exact header text gets it; its claims are each token's own."""
    key = SigningKey.from_jwk(ed25519_private_jwk("gw")).key
    first = sign_compact({"kid": "gw", "jku": "http://gw/jwks"}, b'{"sub":"a"}', key)
    second = sign_compact({"kid": "gw", "jku": "http://gw/jwks"}, b'{"sub":"b"}', key)
    other = sign_compact({"kid": "gw", "jku": "http://evil/jwks"}, b'{"sub":"a"}', key)
    (header, claims), (again, claims_again) = read_unverified(first), read_unverified(second)
    assert again is header
    assert (claims, claims_again) == ({"sub": "a"}, {"sub": "b"})
    with pytest.raises(TypeError):
        header["jku"] = "http://evil/jwks"  # type: ignore[index]
    assert read_unverified(other)[0]["jku"] == "http://evil/jwks"
    assert read_unverified(first)[0]["jku"] == "http://gw/jwks"
    for malformed in ("W10.e30.sig", "!!.e30.sig"):  # a JSON list; not base64url
        with pytest.raises(ValueError, match=r"JSON object|base64url"):
            read_unverified(malformed)
