"""The conversation vocabulary every layer speaks: blocks, messages, usage, stream chunks.

- `blocks`: the closed set of content blocks;
- `messages`: user, assistant (with usage), system and tool-result messages;
- `usage`: token counts with derived totals and saturating addition;
- `stream`: stream chunks and the `Accumulator` that folds them into blocks;
- `codec`: strict JSON decoding and canonical encoding;
- `clone`: the one way to copy content;
- `a2a`: blocks to and from A2A parts (imports the A2A models; import it only where needed).
"""

from looping_core.content.blocks import (
    AudioBlock,
    Block,
    DocumentBlock,
    ImageBlock,
    ProviderPayload,
    RefusalBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from looping_core.content.clone import clone
from looping_core.content.messages import (
    AssistantMessage,
    Conversation,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from looping_core.content.usage import Usage

__all__ = [
    "AssistantMessage",
    "AudioBlock",
    "Block",
    "Conversation",
    "DocumentBlock",
    "ImageBlock",
    "Message",
    "ProviderPayload",
    "RefusalBlock",
    "SystemMessage",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolResultMessage",
    "ToolUseBlock",
    "Usage",
    "UserMessage",
    "clone",
]
