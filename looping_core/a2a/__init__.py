"""The A2A 1.0 protocol, as an agent behind a gateway speaks it (no server in here).

What an app, a plugin or a gateway's peer imports: the wire types an agent sees; the ProtoJSON
converter; blocks to and from parts, and an agent's turn as messages (`agent_message`,
`reply_parts`, `message_content`); the agent's signing key; verifying signed cards, gateway
tokens and pushes (`verify_push` with `SeenPushes` to drop repeated ones). The server's own
machinery (JSON-RPC envelopes and the error table, the grammar of what is accepted, the key-set
cache, card signing) lives in the private modules beside this one.
"""

from looping_core.a2a._card import (
    CardSignatureError,
    verify_card,
)
from looping_core.a2a._errors import (
    DailyBudgetSpent,
    RateLimited,
    RpcError,
    TooManyStreams,
    TooManyTurns,
    Unavailable,
)
from looping_core.a2a._gateway_token import (
    TokenPolicy,
    TokenRejected,
    verify_gateway_token,
)
from looping_core.a2a._keys import (
    SigningKey,
    SigningKeyError,
    generate_signing_key,
    load_signing_key,
)
from looping_core.a2a._models import (
    TERMINAL_STATES,
    AgentCard,
    Artifact,
    AuthenticationInfo,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from looping_core.a2a._parts import (
    block_to_part,
    blocks_to_parts,
    part_to_block,
    parts_to_blocks,
)
from looping_core.a2a._protojson import (
    WireError,
    from_wire,
    to_wire,
)
from looping_core.a2a._push import (
    SIGNATURE_HEADER,
    TOKEN_HEADER,
    MemorySeenPushes,
    PushReplayed,
    PushSignatureError,
    PushSigner,
    SeenPushes,
    verify_push,
)
from looping_core.a2a._turn_messages import (
    REFUSAL_METADATA,
    agent_message,
    message_content,
    reply_parts,
)

__all__ = [
    "REFUSAL_METADATA",
    "SIGNATURE_HEADER",
    "TERMINAL_STATES",
    "TOKEN_HEADER",
    "AgentCard",
    "Artifact",
    "AuthenticationInfo",
    "CardSignatureError",
    "DailyBudgetSpent",
    "MemorySeenPushes",
    "Message",
    "Part",
    "PushReplayed",
    "PushSignatureError",
    "PushSigner",
    "RateLimited",
    "Role",
    "RpcError",
    "SeenPushes",
    "SigningKey",
    "SigningKeyError",
    "StreamResponse",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskPushNotificationConfig",
    "TaskState",
    "TaskStatus",
    "TaskStatusUpdateEvent",
    "TokenPolicy",
    "TokenRejected",
    "TooManyStreams",
    "TooManyTurns",
    "Unavailable",
    "WireError",
    "agent_message",
    "block_to_part",
    "blocks_to_parts",
    "from_wire",
    "generate_signing_key",
    "load_signing_key",
    "message_content",
    "part_to_block",
    "parts_to_blocks",
    "reply_parts",
    "to_wire",
    "verify_card",
    "verify_gateway_token",
    "verify_push",
]
