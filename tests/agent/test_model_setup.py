"""`[tenants.<id>.model]` becomes chat models at startup: providers by name (built-in or a
plugin's), keys from the environment, every problem at once; agents get their models."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import pluggy
import pytest

from looping_core.agent import (
    ModelRequest,
    ModelSetupError,
    respond_with_fallback,
)
from looping_core.config import Config, parse_config
from looping_core.content import TextBlock, UserMessage
from looping_core.contract import ModelProvider
from looping_core.plugins import PluginHost
from looping_core.plugins._registry import Contribution, PluginRegistry, Provenance
from looping_core.server.internal import tenant_models
from looping_core.testing import FakeModelServer, Reply

CARD = """
[tenants.{id}.card]
name = "A"
description = "An agent."
skills = [{{ id = "s", name = "S", description = "Does it.", tags = ["t"] }}]
"""


def config_with(models: str, tenant: str = "alice") -> Config:
    text = f'[tenants.{tenant}]\nagent = "support.agents:EchoAgent"\n' + CARD.format(id=tenant)
    return parse_config(text + models, source="models-test.toml")


def hosts(config: Config, providers: dict[str, ModelProvider] | None = None) -> dict[str, Any]:
    contributions = {
        name: Contribution(provider, Provenance("lpt-models", "lpt-models", "1.0"))
        for name, provider in (providers or {}).items()
    }
    registry = PluginRegistry(model_providers=contributions)
    host = PluginHost(registry, pluggy.PluginManager("looping"))
    return dict.fromkeys(config.tenants, host)


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as fake:
        yield fake


async def test_a_model_and_its_fallback_are_made_in_order(server: FakeModelServer) -> None:
    config = config_with(
        f"""
[tenants.alice.model]
model = "local"
base_url = "{server.base_url}"
max_retries = 0
[[tenants.alice.model.fallback]]
model = "hosted"
base_url = "{server.base_url}"
api_key = "env:LPT_MODEL_KEY"
max_retries = 0
"""
    )
    models = tenant_models(config, hosts(config), {"LPT_MODEL_KEY": "sk-test"})
    alice = models["alice"]
    assert [model.label for model in alice] == ["openai:local", "openai:hosted"]
    server.replies += [Reply.failure(503), Reply.text("from hosted")]
    request = ModelRequest((UserMessage([TextBlock("hi")]),))
    response = await respond_with_fallback(alice, request)
    assert response.served_by == "openai:hosted"
    assert [sent["model"] for sent in server.requests] == ["local", "hosted"]
    for model in alice:
        await model.aclose()


def test_a_tenant_without_a_model_gets_none() -> None:
    config = config_with("")
    assert tenant_models(config, hosts(config), {}) == {"alice": ()}


def test_every_problem_is_reported_at_once_naming_the_key_and_the_fix() -> None:
    config = config_with(
        """
[tenants.alice.model]
model = "m"
provider = "nowhere"
[[tenants.alice.model.fallback]]
model = "m"
api_key = "env:LPT_UNSET_KEY"
"""
    )
    with pytest.raises(ModelSetupError) as caught:
        tenant_models(config, hosts(config), {})
    assert list(caught.value.problems) == [
        "tenants.alice.model.provider: no model provider 'nowhere' (known: openai); enable the "
        "plugin that provides it, or fix the name",
        "tenants.alice.model.fallback[0].api_key: the environment variable LPT_UNSET_KEY is "
        "not set; export it before starting",
    ]
    assert str(caught.value).startswith("2 model problems:")
    assert "sk-" not in str(caught.value)


def test_a_plugins_provider_is_used_by_name_and_may_not_replace_a_built_in() -> None:
    made: list[tuple[str, dict[str, Any]]] = []

    class Plugged:
        label = "plugged:m"

        def stream(self, request: ModelRequest) -> Any:
            raise NotImplementedError

        async def aclose(self) -> None:
            pass

    def factory(model: str, options: dict[str, Any]) -> Plugged:
        made.append((model, options))
        return Plugged()

    config = config_with('[tenants.alice.model]\nprovider = "plugged"\nmodel = "m"\n')
    plugged = ModelProvider(name="plugged", description="d", factory=factory)
    models = tenant_models(config, hosts(config, {"plugged": plugged}), {})
    assert [model.label for model in models["alice"]] == ["plugged:m"]
    assert made[0][0] == "m"
    assert made[0][1]["timeout"] == 60.0

    impostor = ModelProvider(name="openai", description="d", factory=factory)
    with pytest.raises(ModelSetupError, match="'openai' is built into looping-core"):
        tenant_models(config, hosts(config, {"plugged": plugged, "openai": impostor}), {})


def test_a_provider_that_returns_no_chat_model_is_refused() -> None:
    config = config_with('[tenants.alice.model]\nprovider = "broken"\nmodel = "m"\n')
    broken = ModelProvider(name="broken", description="d", factory=lambda model, options: None)
    with pytest.raises(ModelSetupError, match="returned NoneType, not a chat model"):
        tenant_models(config, hosts(config, {"broken": broken}), {})


def test_a_missing_openai_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    config = config_with('[tenants.alice.model]\nmodel = "m"\n')
    with pytest.raises(ModelSetupError, match=r"pip install 'looping-core\[openai\]'"):
        tenant_models(config, hosts(config), {})
