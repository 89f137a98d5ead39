"""The local gateway: what stands in front of an agent on one machine (there is no development
bypass of the gateway checks; you run a gateway instead).

- `LocalGateway`: its own Ed25519 key, its JWKS on a loopback port, tokens minted as a real
  gateway mints them, turns sent as a gateway sends them, pushes received and verified against
  the agent's JWKS;
- `mint_token`: one gateway token;
- `gateway_key(folder)`: the gateway's key, made once and kept in a local state folder (a
  key file others can read is refused: `KeyFileExposed`);
- `LocalServer`: the loopback aiohttp server it (and the test harness's fakes) run on;
- what the CLI's `gateway`, `send` and `tasks` do: `run_gateway`, `send_text`, `call_agent`.
"""

from looping_core.gateway._client import (
    AgentRefused,
    GatewayError,
    Target,
    call_agent,
    run_gateway,
    send_text,
)
from looping_core.gateway._gateway import (
    JWKS_ROUTE,
    SETTLED_STATES,
    LocalGateway,
    ReceivedPush,
    user_message,
)
from looping_core.gateway._local import LocalServer, Startable
from looping_core.gateway._state import KeyFileExposed, default_state_folder, gateway_key
from looping_core.gateway._tokens import mint_token

__all__ = [
    "JWKS_ROUTE",
    "SETTLED_STATES",
    "AgentRefused",
    "GatewayError",
    "KeyFileExposed",
    "LocalGateway",
    "LocalServer",
    "ReceivedPush",
    "Startable",
    "Target",
    "call_agent",
    "default_state_folder",
    "gateway_key",
    "mint_token",
    "run_gateway",
    "send_text",
    "user_message",
]
