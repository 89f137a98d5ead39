"""The official A2A SDK's client against our edge: card discovery and GetExtendedAgentCard."""

from __future__ import annotations

import json

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.client.errors import A2AClientError
from a2a.types import GetExtendedAgentCardRequest
from a2a.utils.signing import create_signature_verifier
from jwt.api_jwk import PyJWK

from looping_core.testing import FakeGateway

from a2a_support import RunningAgent


async def verifier_for(agent: RunningAgent):  # type: ignore[no-untyped-def]
    async with agent.session.get(agent.base_url + "/.well-known/jwks.json") as response:
        keys = {key["kid"]: key for key in json.loads(await response.read())["keys"]}
    return create_signature_verifier(lambda kid, jku: PyJWK(keys[kid]), ["EdDSA"])


async def test_the_sdk_resolves_and_verifies_the_stub_card(agent: RunningAgent) -> None:
    verify = await verifier_for(agent)
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, agent.base_url).get_agent_card(signature_verifier=verify)
    assert card.supported_interfaces[0].url == agent.endpoint
    assert card.capabilities.extended_agent_card


async def test_the_sdk_client_gets_a_tenants_extended_card(
    agent: RunningAgent, gateway: FakeGateway
) -> None:
    token = gateway.token(tenant="alice", aud=agent.endpoint)
    verify = await verifier_for(agent)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        client = await create_client(
            agent.base_url,
            ClientConfig(httpx_client=http, streaming=False),
            signature_verifier=verify,
        )
        card = await client.get_extended_agent_card(
            GetExtendedAgentCardRequest(tenant="alice"), signature_verifier=verify
        )
        await client.close()
    assert card.name == "Alice"
    assert card.supported_interfaces[0].tenant == "alice"


async def test_the_sdk_client_without_a_token_is_refused(agent: RunningAgent) -> None:
    async with httpx.AsyncClient() as http:
        client = await create_client(
            agent.base_url, ClientConfig(httpx_client=http, streaming=False)
        )
        with pytest.raises(A2AClientError):
            await client.get_extended_agent_card(GetExtendedAgentCardRequest(tenant="alice"))
        await client.close()
