"""The conversation vocabulary every layer speaks: blocks, messages, usage, stream chunks.

- blocks: the closed set of content blocks;
- messages: user, assistant (with usage), system and tool-result messages;
- `Usage`: token counts with derived totals and saturating addition;
- stream chunks and the `Accumulator` that folds them into blocks;
- the codec: strict JSON decoding (`decode_*`, typed errors naming the field) and canonical
  encoding (`encode`);
- `clone`: the one way to copy content.

Blocks to and from A2A parts are the protocol's (`looping_core.a2a`).
"""

from looping_core.content._approvals import (
    APPROVAL_STATES,
    APPROVALS_KEY,
    MAX_DECISION_REASON,
    ApprovalsInvalid,
    Decision,
    ToolApproval,
    approval_request,
    decisions_in,
    is_approvals_part,
)
from looping_core.content._blocks import (
    AudioBlock,
    Block,
    DataBlock,
    DocumentBlock,
    ImageBlock,
    ProviderPayload,
    RefusalBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from looping_core.content._clone import (
    clone,
)
from looping_core.content._codec import (
    DEFAULT_LIMITS,
    Limits,
    decode,
    decode_block,
    decode_conversation,
    decode_message,
    decode_usage,
    encode,
)
from looping_core.content._errors import (
    AccumulatorError,
    BlockTooLarge,
    ContentDecodeError,
    ContentError,
    InvalidText,
    InvalidValue,
    MissingField,
    NoA2AForm,
    TooManyBlocks,
    UnknownField,
    UnknownTag,
    WrongType,
)
from looping_core.content._messages import (
    AssistantMessage,
    Conversation,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserContent,
    UserMessage,
)
from looping_core.content._stream import (
    Accumulator,
    Chunk,
    ImageChunk,
    RefusalChunk,
    TextChunk,
    ThinkingChunk,
    ToolUseChunk,
)
from looping_core.content._usage import (
    Usage,
)

__all__ = [
    "APPROVALS_KEY",
    "APPROVAL_STATES",
    "DEFAULT_LIMITS",
    "MAX_DECISION_REASON",
    "Accumulator",
    "AccumulatorError",
    "ApprovalsInvalid",
    "AssistantMessage",
    "AudioBlock",
    "Block",
    "BlockTooLarge",
    "Chunk",
    "ContentDecodeError",
    "ContentError",
    "Conversation",
    "DataBlock",
    "Decision",
    "DocumentBlock",
    "ImageBlock",
    "ImageChunk",
    "InvalidText",
    "InvalidValue",
    "Limits",
    "Message",
    "MissingField",
    "NoA2AForm",
    "ProviderPayload",
    "RefusalBlock",
    "RefusalChunk",
    "SystemMessage",
    "TextBlock",
    "TextChunk",
    "ThinkingBlock",
    "ThinkingChunk",
    "TooManyBlocks",
    "ToolApproval",
    "ToolResultBlock",
    "ToolResultMessage",
    "ToolUseBlock",
    "ToolUseChunk",
    "UnknownField",
    "UnknownTag",
    "Usage",
    "UserContent",
    "UserMessage",
    "WrongType",
    "approval_request",
    "clone",
    "decisions_in",
    "decode",
    "decode_block",
    "decode_conversation",
    "decode_message",
    "decode_usage",
    "encode",
    "is_approvals_part",
]
