"""A local model endpoint: models that react, served the way a hosted model is.

- `FunctionModel`: a `ChatModel` whose every answer is what a function of the `ModelRequest`
  returns (text, a `ModelReply` with `ToolCall`s and usage, the events themselves, or a
  `ModelError`); `TestModel`: calls every offered tool once with arguments valid for its schema
  (`arguments_for`), then answers with what they returned.
- `ModelServer`: an OpenAI-compatible Chat Completions endpoint on 127.0.0.1 (streamed or not,
  tool calls, usage) answering from any `ChatModel`, `TestModel` by default; `serve_model` runs
  it until Ctrl-C (`looping model serve`), and `load_model` finds the `module:attr` it is given.

An agent's `[tenants.<id>.model]` aims at `ModelServer.base_url` (`http://127.0.0.1:11434/v1`
by default, Ollama's address) and answers offline. `looping_core.testing` re-exports the models.
"""

from looping_core.modelserver._function_models import (
    FunctionModel,
    ModelReply,
    TestModel,
    ToolCall,
    arguments_for,
    reply_events,
)
from looping_core.modelserver._server import (
    DEFAULT_PORT,
    ModelLoadError,
    ModelServer,
    load_model,
    serve_model,
)

__all__ = [
    "DEFAULT_PORT",
    "FunctionModel",
    "ModelLoadError",
    "ModelReply",
    "ModelServer",
    "TestModel",
    "ToolCall",
    "arguments_for",
    "load_model",
    "reply_events",
    "serve_model",
]
