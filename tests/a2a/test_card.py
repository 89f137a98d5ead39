"""The signed stub card, tenants' extended cards, and their signatures (ours and the SDK's view)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
import rfc8785
from a2a.types import AgentCard as ProtoAgentCard
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from google.protobuf.json_format import ParseDict
from jwt.api_jwk import PyJWK

from looping_core.a2a import AgentCard, from_wire, to_wire
from looping_core.a2a._card import CardSignatureError, canonical_card_bytes, verify_card
from looping_core.testing import FakeGateway, ed25519_private_jwk, public_jwk_of

from support.serving import RunningAgent, serving

LISTED = """
[card]
name = "Listed agents"
description = "A deployment that names its agents."
list_tenants = true
"""


async def get(
    agent: RunningAgent, path: str, **headers: str
) -> tuple[int, Mapping[str, str], bytes]:
    async with agent.session.get(agent.base_url + path, headers=headers) as response:
        return response.status, response.headers.copy(), await response.read()


async def jwks(agent: RunningAgent) -> dict[str, Any]:
    status, _, body = await get(agent, "/.well-known/jwks.json")
    assert status == 200
    return json.loads(body)


def sdk_verify(card: dict[str, Any], key_set: dict[str, Any]) -> None:
    """The official SDK's verifier, fed our JWKS by kid, EdDSA only."""
    keys = {key["kid"]: key for key in key_set["keys"]}
    verifier = create_signature_verifier(lambda kid, jku: PyJWK(keys[kid]), ["EdDSA"])
    verifier(ParseDict(card, ProtoAgentCard()))


def empties(value: Any, path: str = "$") -> list[str]:
    """Paths of every empty string, array or object in a JSON value."""
    if value in ("", [], {}):
        return [path]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in empties(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in empties(item, f"{path}[{index}]")]
    return []


async def test_jwks_serves_the_public_key_derived_from_the_private_one(agent: RunningAgent) -> None:
    key_set = await jwks(agent)
    assert key_set == {"keys": [public_jwk_of(agent.signing_jwk)]}
    assert "d" not in key_set["keys"][0]


async def test_stub_card_describes_the_deployment(agent: RunningAgent) -> None:
    status, headers, body = await get(agent, "/.well-known/agent-card.json")
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    assert headers["Cache-Control"] == "public, max-age=300"
    card = json.loads(body)
    rest = agent.config.server.rest_url
    assert card["supportedInterfaces"] == [
        {"url": agent.endpoint, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": rest, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]
    assert card["capabilities"] == {
        "extendedAgentCard": True,
        "pushNotifications": True,
        "streaming": True,
    }
    scheme = card["securitySchemes"]["gatewayToken"]["httpAuthSecurityScheme"]
    assert (scheme["scheme"], scheme["bearerFormat"]) == ("Bearer", "JWT")
    # Its tenants are the deployment's customers: not named to anyone who asks.
    assert "alice" not in body.decode().lower()
    assert "bob" not in body.decode().lower()
    assert empties(card) == []
    ParseDict(card, ProtoAgentCard())  # strict: an unknown field would raise


async def test_stub_card_names_the_tenants_only_when_the_config_says_so(
    gateway: FakeGateway,
) -> None:
    async with serving(gateway, extra=LISTED) as agent:
        _, _, body = await get(agent, "/.well-known/agent-card.json")
    card = json.loads(body)
    assert "alice (Alice)" in card["description"]
    assert "bob (Bob)" in card["description"]
    ParseDict(card, ProtoAgentCard())


async def test_stub_card_etag_and_304(agent: RunningAgent) -> None:
    _, headers, body = await get(agent, "/.well-known/agent-card.json")
    etag = headers["ETag"]
    status, again, revalidated = await get(
        agent, "/.well-known/agent-card.json", **{"If-None-Match": etag}
    )
    assert (status, again["ETag"], revalidated) == (304, etag, b"")
    status, _, _ = await get(agent, "/.well-known/agent-card.json", **{"If-None-Match": '"other"'})
    assert status == 200
    assert len(body) > 0


async def test_stub_card_signature_verifies_with_our_helper_and_the_sdk(
    agent: RunningAgent,
) -> None:
    _, _, body = await get(agent, "/.well-known/agent-card.json")
    card, key_set = json.loads(body), await jwks(agent)
    header = verify_card(card, key_set)
    assert header == {
        "alg": "EdDSA",
        "typ": "JOSE",
        "kid": "agent-key-1",
        "jku": agent.base_url + "/.well-known/jwks.json",
    }
    sdk_verify(card, key_set)


async def test_the_served_card_is_a_fixed_point(agent: RunningAgent) -> None:
    _, _, body = await get(agent, "/.well-known/agent-card.json")
    reencoded = rfc8785.dumps(to_wire(from_wire(json.loads(body), AgentCard)))
    assert reencoded == body


async def test_a_tampered_card_fails_both_verifiers(agent: RunningAgent) -> None:
    _, _, body = await get(agent, "/.well-known/agent-card.json")
    card, key_set = json.loads(body), await jwks(agent)
    card["description"] = card["description"] + " (and a phishing link)"
    with pytest.raises(CardSignatureError):
        verify_card(card, key_set)
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(card, key_set)


async def test_a_card_checked_against_someone_elses_keys_fails(agent: RunningAgent) -> None:
    _, _, body = await get(agent, "/.well-known/agent-card.json")
    stranger = {"keys": [public_jwk_of(ed25519_private_jwk("agent-key-1"))]}
    with pytest.raises(CardSignatureError):
        verify_card(json.loads(body), stranger)


def test_verify_card_refuses_unsigned_and_non_eddsa_signatures() -> None:
    card = {"name": "x", "signatures": [{"protected": "eyJhbGciOiJIUzI1NiJ9", "signature": "AA"}]}
    with pytest.raises(CardSignatureError, match="no signature on the card verifies"):
        verify_card(card, {"keys": []})
    with pytest.raises(CardSignatureError, match="no signatures"):
        verify_card({"name": "x"}, {"keys": []})


def test_canonical_bytes_leave_out_signatures() -> None:
    assert canonical_card_bytes({"b": 1, "a": "é", "signatures": [1]}) == '{"a":"é","b":1}'.encode()


async def test_extended_card_for_the_tokens_tenant(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    status, _, body = await agent.rpc("GetExtendedAgentCard", {"tenant": "alice"}, token=token)
    assert status == 200
    card = body["result"]
    assert (card["name"], card["version"]) == ("Alice", "1.2.0")
    assert card["supportedInterfaces"] == [
        {
            "url": agent.endpoint,
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
            "tenant": "alice",
        },
        {
            "url": agent.config.server.rest_url,
            "protocolBinding": "HTTP+JSON",
            "protocolVersion": "1.0",
            "tenant": "alice",
        },
    ]
    assert [skill["id"] for skill in card["skills"]] == ["notes"]
    assert empties(card) == []
    key_set = await jwks(agent)
    verify_card(card, key_set)
    sdk_verify(card, key_set)
    ParseDict(card, ProtoAgentCard())


async def test_extended_card_requires_a_tenant(agent: RunningAgent, gateway: FakeGateway) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    for params in (None, {}):
        status, _, body = await agent.rpc("GetExtendedAgentCard", params, token=token)
        assert status == 200
        assert body["error"]["code"] == -32602
        assert body["error"]["data"][1]["fieldViolations"] == [
            {"field": "params.tenant", "description": "required field missing"}
        ]
    # Authenticated first (its token verified against the tenant it names), then told.
    assert gateway.jwks_fetches == 1
    status, _, body = await agent.rpc("GetExtendedAgentCard", {})
    assert status == 401  # without a token, the missing tenant is not even looked at


async def test_an_unknown_tenant_reveals_nothing_to_an_unauthenticated_caller(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    known = await agent.rpc("GetExtendedAgentCard", {"tenant": "alice"})
    unknown = await agent.rpc("GetExtendedAgentCard", {"tenant": "mallory"})
    assert known[0] == unknown[0] == 401
    assert known[2] == unknown[2]


async def test_an_unknown_tenant_with_a_valid_token_is_refused(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="mallory", aud=agent.endpoint)
    status, _, body = await agent.rpc("GetExtendedAgentCard", {"tenant": "mallory"}, token=token)
    assert status == 200
    assert body["error"]["code"] == -32602
    assert "alice" not in json.dumps(body)
    assert "bob" not in json.dumps(body)


@pytest.mark.parametrize("path", ["/.well-known/agent-card.json", "/.well-known/jwks.json"])
async def test_card_and_key_set_carry_validators_and_answer_304(
    agent: RunningAgent, path: str
) -> None:
    async with agent.session.get(agent.base_url + path) as response:
        assert response.status == 200
        etag, modified = response.headers["ETag"], response.headers["Last-Modified"]
    assert modified.endswith(" GMT")
    for headers in ({"If-None-Match": etag}, {"If-Modified-Since": modified}):
        async with agent.session.get(agent.base_url + path, headers=headers) as response:
            assert response.status == 304, headers
            assert await response.read() == b""
    stale = {"If-None-Match": '"other"', "If-Modified-Since": modified}  # the ETag decides
    old = {"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}
    for headers in (stale, old, {"If-Modified-Since": "garbage"}):
        async with agent.session.get(agent.base_url + path, headers=headers) as response:
            assert response.status == 200, headers
