"""Agent cards: the deployment's public stub, each tenant's own card, their signatures.

A card is signed as A2A 1.0 §8.4 describes: a JWS (EdDSA) whose payload is the RFC 8785
canonical form of the card exactly as served, minus `signatures`, detached (the signature object
holds only the protected header and the signature). Cards are built free of empty strings, arrays
and objects, so verifiers that strip empties (the official SDK) and verifiers that keep required
empties (the spec) canonicalize them to the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs
import rfc8785
from joserfc.errors import JoseError
from joserfc.jwk import OKPKey

from looping_core.a2a._jose import (
    ALGORITHMS,
    b64url,
    b64url_decode,
    public_key,
    sign_compact,
    verify_compact,
)
from looping_core.a2a._keys import SigningKey
from looping_core.a2a._models import (
    AgentCapabilities,
    AgentCard,
    AgentCardSignature,
    AgentInterface,
    AgentSkill,
    HttpAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from looping_core.a2a._protojson import to_wire
from looping_core.config import CardConfig, Config, SkillConfig, TenantConfig
from looping_core.errors import LoopingError

__all__ = [
    "CardSignatureError",
    "SignedCard",
    "build_stub_card",
    "build_tenant_card",
    "canonical_card_bytes",
    "sign_card",
    "verify_card",
]

GATEWAY_SCHEME = "gatewayToken"


class CardSignatureError(LoopingError):
    """No signature on the card verifies with the given keys."""


@attrs.frozen
class SignedCard:
    """A signed card and the exact bytes served for it (a fixed point of decode/re-encode)."""

    card: AgentCard
    body: bytes

    @property
    def etag(self) -> str:
        return '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'

    @classmethod
    def of(cls, card: AgentCard) -> SignedCard:
        return cls(card=card, body=rfc8785.dumps(to_wire(card)))


def _security() -> tuple[dict[str, SecurityScheme], tuple[SecurityRequirement, ...]]:
    scheme = HttpAuthSecurityScheme(
        scheme="Bearer",
        bearer_format="JWT",
        description=(
            "An EdDSA JWT issued by a trusted gateway for one tenant; its jku must be on this "
            "agent's gateway allowlist and its aud must be this endpoint."
        ),
    )
    # A scope list keeps the requirement free of an empty object (see the module docstring).
    requirement = SecurityRequirement(schemes={GATEWAY_SCHEME: StringList(list=("a2a",))})
    return {GATEWAY_SCHEME: SecurityScheme(http_auth_security_scheme=scheme)}, (requirement,)


def _skill(skill: SkillConfig) -> AgentSkill:
    return AgentSkill(
        id=skill.id,
        name=skill.name,
        description=skill.description,
        tags=skill.tags,
        examples=skill.examples,
    )


def _interfaces(config: Config, tenant: str = "") -> tuple[AgentInterface, ...]:
    """JSON-RPC first (preferred), then HTTP+JSON, then gRPC when it is served (its URL the
    `host:port` a client dials, as the proto says); each carries the tenant (if any)."""
    server = config.server
    grpc = (
        (
            AgentInterface(
                url=server.grpc_url, protocol_binding="GRPC", protocol_version="1.0", tenant=tenant
            ),
        )
        if server.grpc_port
        else ()
    )
    return (
        AgentInterface(
            url=server.endpoint_url, protocol_binding="JSONRPC", protocol_version="1.0",
            tenant=tenant,
        ),
        AgentInterface(
            url=server.rest_url, protocol_binding="HTTP+JSON", protocol_version="1.0",
            tenant=tenant,
        ),
        *grpc,
    )  # fmt: skip


def _card(
    card: CardConfig,
    interfaces: tuple[AgentInterface, ...],
    skills: tuple[AgentSkill, ...],
    *,
    streaming: bool,
) -> AgentCard:
    schemes, requirements = _security()
    return AgentCard(
        name=card.name,
        description=card.description,
        supported_interfaces=interfaces,
        version=card.version,
        capabilities=AgentCapabilities(
            streaming=streaming, push_notifications=True, extended_agent_card=True
        ),
        default_input_modes=card.input_modes,
        default_output_modes=card.output_modes,
        skills=skills,
        security_schemes=schemes,
        security_requirements=requirements,
    )


def build_stub_card(config: Config) -> AgentCard:
    """The public card: the deployment, its interfaces without a tenant, and (`[card]
    list_tenants`) the tenants named for humans."""
    if config.card.list_tenants:
        names = ", ".join(
            f"{tenant_id} ({tenant.card.name})"
            for tenant_id, tenant in sorted(config.tenants.items())
        )
        directory = f"Agents here: {names}." if names else "No agents are configured yet."
        stub = attrs.evolve(config.card, description=f"{config.card.description} {directory}")
    else:  # the tenants behind an endpoint are its customers: not for anyone who asks
        directory = "Several agents are served here."
        stub = config.card
    skills = tuple(_skill(s) for s in config.card.skills) or (
        AgentSkill(
            id="agent-directory",
            name="Agents behind this endpoint",
            description=(
                f"{directory} Each is a tenant of this endpoint: a gateway token for that tenant "
                "unlocks its own card through GetExtendedAgentCard."
            ),
            tags=("directory",),
        ),
    )
    return _card(stub, _interfaces(config), skills, streaming=config.streaming.enabled)


def build_tenant_card(config: Config, tenant_id: str, tenant: TenantConfig) -> AgentCard:
    """A tenant's own card: its name, skills, and its interfaces carrying its `tenant`."""
    skills = tuple(_skill(s) for s in tenant.card.skills)
    interfaces = _interfaces(config, tenant_id)
    return _card(tenant.card, interfaces, skills, streaming=config.streaming.enabled)


def canonical_card_bytes(card: Mapping[str, Any] | AgentCard) -> bytes:
    """RFC 8785 bytes of the card as served, without `signatures`: what a signature covers."""
    document = dict(to_wire(card) if isinstance(card, AgentCard) else card)
    document.pop("signatures", None)
    return rfc8785.dumps(document)


def sign_card(card: AgentCard, key: SigningKey, jku: str) -> SignedCard:
    """Sign `card` (replacing any signatures) with a detached EdDSA JWS."""
    unsigned = attrs.evolve(card, signatures=())
    protected = {"typ": "JOSE", "kid": key.kid, "jku": jku}
    compact = sign_compact(protected, canonical_card_bytes(unsigned), key.key)
    header, _, signature = compact.split(".")
    signed = attrs.evolve(
        card, signatures=(AgentCardSignature(protected=header, signature=signature),)
    )
    return SignedCard.of(signed)


def verify_card(card: Mapping[str, Any] | AgentCard, jwks: Mapping[str, Any]) -> dict[str, Any]:
    """Verify a card's signatures against a JWKS; return the protected header that verified.

    `card` is the JSON document as received (or a model). Only EdDSA signatures by Ed25519 keys
    of `jwks` are considered; the first that verifies wins. Raises `CardSignatureError`.
    """
    document = to_wire(card) if isinstance(card, AgentCard) else card
    signatures = document.get("signatures") or []
    if not signatures:
        raise CardSignatureError("the card has no signatures")
    payload = b64url(canonical_card_bytes(document))
    keys = _ed25519_keys(jwks)
    for entry in signatures:
        header = _protected_header(entry)
        if header is None or header.get("alg") not in ALGORITHMS:
            continue
        key = keys.get(str(header.get("kid")))
        if key is None:
            continue
        token = f"{entry['protected']}.{payload}.{entry.get('signature', '')}"
        try:
            verify_compact(token, key)
        except (JoseError, ValueError):
            continue
        return header
    raise CardSignatureError("no signature on the card verifies with the given key set")


def _protected_header(entry: object) -> dict[str, Any] | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("protected"), str):
        return None
    text = entry["protected"]
    try:
        header = json.loads(b64url_decode(text))
    except (ValueError, UnicodeDecodeError):
        return None
    return header if isinstance(header, dict) else None


def _ed25519_keys(jwks: Mapping[str, Any]) -> dict[str, OKPKey]:
    keys: dict[str, OKPKey] = {}
    for jwk in jwks.get("keys", []):
        key = public_key(jwk) if isinstance(jwk, dict) else None
        if key is not None:
            keys[str(jwk.get("kid"))] = key
    return keys
