"""The agent runtime.

- The seam: a tenant's agent is a subclass of `Agent` named in `[tenants.<id>] agent =
  "module:Class"`; the runner calls `run(turn)` once per turn with a `TurnInput` and takes back a
  `TurnResult`.
- The model runtime: `ChatModel` (a request in the content vocabulary in, a stream of content
  chunks and one `StreamEnd` out), `respond` (the stream folded into one `ModelResponse`),
  `respond_with_fallback` (the next model when one is unavailable), and the built-in `openai`
  provider for any OpenAI-compatible endpoint (`OpenAIChatModel`, the `openai` extra).
- `LoopingAgent`: the soul (`agent_soul`) is the app's; the session, the models, the tool loop
  and the budget are core's. With `output_type` it answers in a schema (`AnswerSchema`,
  `StructuredAnswer`): a checked JSON object, as a data part.
- The tool loop: `run_tool_loop` asks the models, runs the tools they call (bad calls become
  error results, never crashes), hands every step to a `StepLog`, keeps to a `Budget` (in money
  too: each call priced by the deployment's `Prices`), takes in
  what the caller sends meanwhile (`Inbox`), and compacts the conversation (`Compactor`) before
  it outgrows the context window.

Nothing here imports the web server, JOSE or the database.
"""

from looping_core.agent._compaction import (
    Compaction,
    Compactor,
    displaceable,
    estimate_tokens,
)
from looping_core.agent._loop import (
    Budget,
    ControlAction,
    Inbox,
    LoopOutcome,
    StepLog,
    run_tool_loop,
)
from looping_core.agent._looping import LoopingAgent
from looping_core.agent._model import (
    STOP_REASONS,
    ChatModel,
    ContextTooLong,
    ModelError,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    OutputRequest,
    StreamEnd,
    TextSink,
    ToolSpec,
    respond,
    respond_with_fallback,
)
from looping_core.agent._openai import MissingExtra, OpenAIChatModel, openai_provider
from looping_core.agent._output import (
    AnswerSchema,
    AnswerTypeError,
    StructuredAnswer,
    given_answer,
)
from looping_core.agent._prices import Prices
from looping_core.agent._providers import ModelSetupError
from looping_core.agent._resume import resume_conversation
from looping_core.agent._seam import (
    Agent,
    AgentContext,
    AgentLoadError,
    ArtifactOut,
    SessionLog,
    TurnEvents,
    TurnInput,
    TurnOutcome,
    TurnResult,
)
from looping_core.agent._settings import LoopingConfig

__all__ = [
    "STOP_REASONS",
    "Agent",
    "AgentContext",
    "AgentLoadError",
    "AnswerSchema",
    "AnswerTypeError",
    "ArtifactOut",
    "Budget",
    "ChatModel",
    "Compaction",
    "Compactor",
    "ContextTooLong",
    "ControlAction",
    "Inbox",
    "LoopOutcome",
    "LoopingAgent",
    "LoopingConfig",
    "MissingExtra",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "ModelResponse",
    "ModelSetupError",
    "ModelUnavailable",
    "OpenAIChatModel",
    "OutputRequest",
    "Prices",
    "SessionLog",
    "StepLog",
    "StreamEnd",
    "StructuredAnswer",
    "TextSink",
    "ToolSpec",
    "TurnEvents",
    "TurnInput",
    "TurnOutcome",
    "TurnResult",
    "displaceable",
    "estimate_tokens",
    "given_answer",
    "openai_provider",
    "respond",
    "respond_with_fallback",
    "resume_conversation",
    "run_tool_loop",
]
