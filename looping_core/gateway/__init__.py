"""The local gateway: what stands in front of an agent on one machine (there is no development
bypass of the gateway checks; you run a gateway instead).

- `LocalGateway`: its own Ed25519 key, its JWKS on a loopback port, tokens minted as a real
  gateway mints them, turns sent as a gateway sends them, pushes received and verified against
  the agent's JWKS;
- `mint_token`: one gateway token;
- `gateway_key(folder)`: the gateway's key, made once and kept in a local state folder (a
  key file others can read is refused: `KeyFileExposed`);
- `AgentRefused`, `GatewayError`: what a call through it can fail with.

The loopback server it runs on and what the CLI's `gateway`, `send` and `tasks` do are for
looping-core's own CLI and harness: `looping_core.gateway.internal`.
"""

from looping_core.gateway.internal import (
    AgentRefused,
    GatewayError,
    KeyFileExposed,
    LocalGateway,
    ReceivedPush,
    gateway_key,
    mint_token,
)

__all__ = [
    "AgentRefused",
    "GatewayError",
    "KeyFileExposed",
    "LocalGateway",
    "ReceivedPush",
    "gateway_key",
    "mint_token",
]
