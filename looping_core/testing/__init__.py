"""The public test harness. Never imported by runtime code.

For plugin authors: run the host's own startup validation on your plugin in your test suite.

```python
from looping_core.testing import assert_plugin_valid, plugin_problems

def test_my_plugin_is_valid():
    assert_plugin_valid("my-plugin", {"api_key": "env:MY_KEY"}, environ={"MY_KEY": "x"})
```

`plugin_store(url, stores)` is a real store for a plugin's tools (what a served turn gives them
as `ToolContext.store`), its tables ensured as at startup.

For the A2A edge: real Ed25519 keys (`ed25519_private_jwk`), gateway tokens
(`make_gateway_token`) and a `FakeGateway` that serves its JWKS on 127.0.0.1 and counts fetches.

For agent authors: `AgentHarness` serves an agent in-process behind a fake gateway (`send` a
turn as the gateway does, take its `result` from the verified push); `ScriptedModel` (a
script of answers, `ScriptedModel.calls(...)` for a tool call), `FunctionModel` (a function of
each request: it reacts to what the agent sent), `TestModel` (calls every offered tool once,
then answers with their results; the three models live in `looping_core.modelserver`, which
serves them over HTTP as `looping model serve` does) and `FakeModelServer` stand in for a
hosted model;
`cassette` records a model's or a tool's HTTP once and replays it offline; `MemorySession`
drives a loop with no store, and `MemoryApprovals` an agent's tool approvals.

For evals: `eval_cases(path)` gives a dataset's cases as pytest parameters, `AgentHarness.eval`
runs one against the served agent, `assert_eval_passed` fails the test naming each check that
did not pass (see `looping_core.evals`).

The pytest plugin (loaded automatically through the `pytest11` entry point; no autouse
fixtures) offers the `plugin_validator` and `fake_gateway` fixtures.
"""

from looping_core.modelserver import FunctionModel, ModelReply, TestModel, ToolCall
from looping_core.testing._cassettes import cassette
from looping_core.testing._evals import EvalSendFailed, assert_eval_passed, eval_cases
from looping_core.testing._gateway import FakeGateway, make_gateway_token
from looping_core.testing._harness import AgentHarness, config_toml, tenant_toml
from looping_core.testing._keys import ed25519_private_jwk, public_jwk_of
from looping_core.testing._models import FakeModelServer, Reply, ScriptedModel
from looping_core.testing._sessions import MemoryApprovals, MemorySession
from looping_core.testing._stores import plugin_store
from looping_core.testing._validation import PluginValidator, assert_plugin_valid, plugin_problems

__all__ = [
    "AgentHarness",
    "EvalSendFailed",
    "FakeGateway",
    "FakeModelServer",
    "FunctionModel",
    "MemoryApprovals",
    "MemorySession",
    "ModelReply",
    "PluginValidator",
    "Reply",
    "ScriptedModel",
    "TestModel",
    "ToolCall",
    "assert_eval_passed",
    "assert_plugin_valid",
    "cassette",
    "config_toml",
    "ed25519_private_jwk",
    "eval_cases",
    "make_gateway_token",
    "plugin_problems",
    "plugin_store",
    "public_jwk_of",
    "tenant_toml",
]
