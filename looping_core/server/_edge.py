"""What the edge serves of itself: its signed cards and its key set, built once at startup from
the config and the signing key (`build_edge`), and the signer of its pushes. The routes that
serve them, with HTTP validators, are `_documents`."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import attrs

from looping_core.a2a import PushSigner, SigningKey, TokenPolicy
from looping_core.a2a.internal import (
    SignedCard,
    build_stub_card,
    build_tenant_card,
    jwks_document,
    sign_card,
)
from looping_core.config import Config

__all__ = ["CACHE_CONTROL", "CARD_PATH", "JWKS_PATH", "Edge", "build_edge", "push_signer"]

JWKS_PATH = "/.well-known/jwks.json"
CARD_PATH = "/.well-known/agent-card.json"
CACHE_CONTROL = "public, max-age=300"


@attrs.frozen
class Edge:
    """What the edge serves and checks, built once at startup from the config and the key."""

    config: Config
    signing_key: SigningKey
    jwks_body: bytes
    stub: SignedCard
    tenant_cards: Mapping[str, SignedCard]
    policies: Mapping[str, TokenPolicy]
    """What a token must be, by binding (`jsonrpc`, `http+json`, `grpc`, and the `inspection`
    endpoint): every check the same, the audience that binding's URL or address (a token is
    for one)."""
    answer_modes: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    """The media types each tenant's answers are made of, where its agent declares them
    (`Agent.output_modes`): a caller that accepts none of them is refused."""
    modified: datetime.datetime = attrs.field(
        factory=lambda: datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    )
    """When what the edge serves last changed: the config file's time (the same for every
    worker), for `Last-Modified`."""

    @property
    def gateway_origins(self) -> frozenset[str]:
        """The gateways whose tokens, and push URLs, are trusted (normalized; the same for every
        binding)."""
        return self.policies["jsonrpc"].gateway_origins

    @property
    def jwks_etag(self) -> str:
        return '"' + hashlib.sha256(self.jwks_body).hexdigest()[:32] + '"'


def _config_time(config: Config) -> datetime.datetime:
    """The config file's modification time (whole seconds, UTC), or now without a file."""
    try:
        stamp = Path(config.source).stat().st_mtime
    except OSError:
        return datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    return datetime.datetime.fromtimestamp(int(stamp), datetime.UTC)


def build_edge(
    config: Config,
    key: SigningKey,
    today: datetime.date | None = None,
    *,
    answer_modes: Mapping[str, tuple[str, ...]] | None = None,
) -> Edge:
    """Sign every card with the agent's key and publish its key set (with the retired keys
    still valid on `today`). `answer_modes`: what each tenant's agent answers with, where it
    says."""
    day = today or datetime.datetime.now(datetime.UTC).date()
    jwks_url = config.server.base_url + JWKS_PATH
    return Edge(
        modified=_config_time(config),
        config=config,
        signing_key=key,
        jwks_body=json.dumps(jwks_document(key, config.security.retired_keys, day)).encode(),
        stub=sign_card(build_stub_card(config), key, jwks_url),
        tenant_cards={
            tenant_id: sign_card(build_tenant_card(config, tenant_id, tenant), key, jwks_url)
            for tenant_id, tenant in config.tenants.items()
        },
        policies={
            "jsonrpc": _policy(config, config.server.endpoint_url),
            "http+json": _policy(config, config.server.rest_url),
            "inspection": _policy(config, config.server.inspection_url),
            "grpc": _policy(config, config.server.grpc_url),
        },
        answer_modes=dict(answer_modes or {}),
    )


def _policy(config: Config, url: str) -> TokenPolicy:
    """What a token for `url` must be: every check the same, its audience that URL."""
    return TokenPolicy(
        endpoint=url,
        gateway_origins=config.security.gateway_origins,
        leeway_seconds=config.security.token_leeway_seconds,
        max_lifetime_seconds=config.security.max_token_lifetime_seconds,
    )


def push_signer(config: Config, key: SigningKey) -> PushSigner:
    """What signs this agent's pushes: its key, its key set's URL, its origin as issuer."""
    return PushSigner(
        key=key, jwks_url=config.server.base_url + JWKS_PATH, issuer=config.server.base_url
    )
