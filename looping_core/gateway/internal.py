"""The door of `looping_core.gateway` for looping-core's CLI, model server and test harness: the
loopback server the gateway and the harness's fakes run on, and what `looping gateway`, `send`
and `tasks` do. Not part of the app-facing API: it may change with any release, and the API
snapshot leaves it out.
"""

from looping_core.gateway._client import (
    AgentRefused,
    GatewayError,
    Target,
    TurnSender,
    call_agent,
    run_gateway,
    send_text,
)
from looping_core.gateway._console import (
    CONSOLE_HEADER,
    CONSOLE_PATH,
    ConsoleGateway,
    ConsoleTarget,
)
from looping_core.gateway._gateway import (
    JWKS_ROUTE,
    SETTLED_STATES,
    LocalGateway,
    ReceivedPush,
    pending_calls,
    user_message,
)
from looping_core.gateway._local import LocalServer, Startable
from looping_core.gateway._state import KeyFileExposed, default_state_folder, gateway_key
from looping_core.gateway._tokens import mint_token

__all__ = [
    "CONSOLE_HEADER",
    "CONSOLE_PATH",
    "JWKS_ROUTE",
    "SETTLED_STATES",
    "AgentRefused",
    "ConsoleGateway",
    "ConsoleTarget",
    "GatewayError",
    "KeyFileExposed",
    "LocalGateway",
    "LocalServer",
    "ReceivedPush",
    "Startable",
    "Target",
    "TurnSender",
    "call_agent",
    "default_state_folder",
    "gateway_key",
    "mint_token",
    "pending_calls",
    "run_gateway",
    "send_text",
    "user_message",
]
