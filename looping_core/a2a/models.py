"""A2A 1.0 wire models the edge accepts and emits (proto `lf.a2a.v1`), as frozen attrs.

Attribute names are the proto field names in snake_case; `protojson.to_wire` writes them in
camelCase. A field with a default is optional on the wire and omitted when it holds the default;
a field without one is REQUIRED. `None` marks proto3 `optional` fields: unset is omitted, a set
`False` is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "AgentCapabilities",
    "AgentCard",
    "AgentCardSignature",
    "AgentInterface",
    "AgentProvider",
    "AgentSkill",
    "GetExtendedAgentCardRequest",
    "HttpAuthSecurityScheme",
    "Part",
    "SecurityRequirement",
    "SecurityScheme",
    "StringList",
]


@attrs.frozen
class AgentInterface:
    url: str
    protocol_binding: str
    protocol_version: str
    tenant: str = ""


@attrs.frozen
class AgentCapabilities:
    streaming: bool | None = None
    push_notifications: bool | None = None
    extended_agent_card: bool | None = None


@attrs.frozen
class AgentProvider:
    url: str
    organization: str


@attrs.frozen
class AgentSkill:
    id: str
    name: str
    description: str
    tags: tuple[str, ...]
    examples: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()


@attrs.frozen
class HttpAuthSecurityScheme:
    scheme: str
    description: str = ""
    bearer_format: str = ""


@attrs.frozen
class SecurityScheme:
    """A oneof; only the HTTP auth member is modelled (the gateway token is a bearer JWT)."""

    http_auth_security_scheme: HttpAuthSecurityScheme | None = None


@attrs.frozen
class StringList:
    list: tuple[str, ...] = ()


@attrs.frozen
class SecurityRequirement:
    schemes: Mapping[str, StringList] = attrs.field(factory=dict)


@attrs.frozen
class AgentCardSignature:
    protected: str
    signature: str
    header: Mapping[str, Any] | None = None


@attrs.frozen
class AgentCard:
    name: str
    description: str
    supported_interfaces: tuple[AgentInterface, ...]
    version: str
    capabilities: AgentCapabilities
    default_input_modes: tuple[str, ...]
    default_output_modes: tuple[str, ...]
    skills: tuple[AgentSkill, ...]
    provider: AgentProvider | None = None
    documentation_url: str = ""
    security_schemes: Mapping[str, SecurityScheme] = attrs.field(factory=dict)
    security_requirements: tuple[SecurityRequirement, ...] = ()
    signatures: tuple[AgentCardSignature, ...] = ()
    icon_url: str = ""


@attrs.frozen
class GetExtendedAgentCardRequest:
    tenant: str = ""


def _exactly_one_content(instance: Part, _: attrs.Attribute[Any], __: Any) -> None:
    present = [
        name for name in ("text", "raw", "url", "data") if getattr(instance, name) is not None
    ]
    if len(present) != 1:
        raise ValueError("a part holds exactly one of text, raw, url or data")


@attrs.frozen
class Part:
    """A piece of a message or artifact: exactly one of `text`, `raw`, `url`, `data`.

    `data` is any JSON value except null (an unset oneof member cannot be told from null).
    """

    text: str | None = None
    raw: bytes | None = None
    url: str | None = None
    data: Any = attrs.field(default=None, validator=_exactly_one_content)
    metadata: Mapping[str, Any] | None = None
    filename: str = ""
    media_type: str = ""
