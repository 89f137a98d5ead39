"""The `PluginHost` facade: runtime hooks across plugins, tenant subsets."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pluggy
import pytest

from looping_core.config import Config, PluginsConfig
from looping_core.contract import Identity, SessionRef, ToolFamily, Turn
from looping_core.plugins import PluginHost
from looping_core.plugins._registry import Contribution, PluginRegistry, Provenance

pytestmark = pytest.mark.usefixtures("installed_test_plugins")

SESSION = SessionRef(
    Identity(tenant="t1", issuer="https://gw.example", subject="caller"), context_id="c1"
)


def host(*keys: str, settings: dict[str, Any] | None = None) -> PluginHost:
    config = Config(plugins=PluginsConfig(enabled=keys, settings=settings or {}))
    return PluginHost.load(config, environ={})


def turn(text: str) -> Turn:
    return Turn(session=SESSION, task_id="task-1", message=text)


def gates() -> Any:
    module = importlib.import_module("lpt_bad.gates")
    for gate in (module.raising, module.refusing, module.not_bool):
        gate.turns.clear()
        gate.displaced.clear()
    for listener in (module.hangs_async, module.hangs_sync):
        listener.calls = 0
        listener.release.clear()
    return module


async def test_no_gates_means_handle() -> None:
    assert await host("good").should_handle_turn([], turn("hi")) is True


async def test_a_raising_gate_fails_open_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    module = gates()
    with caplog.at_level(logging.ERROR, logger="looping_core.plugins"):
        assert await host("gate-raises").should_handle_turn([], turn("hi")) is True
    assert len(module.raising.turns) == 1
    assert "plugin 'gate-raises' (lpt-bad 2.0.0): should_handle_turn raised" in caplog.text


async def test_a_non_bool_answer_fails_open() -> None:
    assert await host("gate-not-bool").should_handle_turn([], turn("hi")) is True


async def test_gates_are_anded_and_all_are_asked() -> None:
    module = gates()
    verdict = await host("gate-refuses", "gate-raises", "example-gates").should_handle_turn(
        [], turn("hi")
    )
    assert verdict is False
    assert len(module.refusing.turns) == 1
    assert len(module.raising.turns) == 1


async def test_example_gate_mutes_with_its_configured_prefix() -> None:
    plugins = host("example-gates", settings={"example-gates": {"mute_prefix": "!quiet"}})
    assert await plugins.should_handle_turn([], turn("!quiet please")) is False
    assert await plugins.should_handle_turn([], turn("/mute is not the prefix")) is True


async def test_a_failing_listener_costs_no_other_listener_its_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    module = gates()
    plugins = host("gate-raises", "gate-refuses", "example-gates")
    with caplog.at_level(logging.INFO):
        await plugins.messages_displaced(["m1", "m2"], SESSION)
    assert module.raising.displaced == [(["m1", "m2"], SESSION)]
    assert module.refusing.displaced == [(["m1", "m2"], SESSION)]
    assert "2 message(s) displaced from context c1 of tenant t1" in caplog.text
    assert "messages_displaced raised; ignored" in caplog.text


async def test_a_hanging_listener_is_bounded_and_every_other_one_is_still_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    module = gates()
    hangs_async, hangs_sync = module.hangs_async, module.hangs_sync
    plugins = host("listener-hangs-async", "listener-hangs-sync", "gate-raises", "gate-refuses")
    try:
        with caplog.at_level(logging.INFO):
            await plugins.messages_displaced(["m1"], SESSION, timeout=0.2)
    finally:
        hangs_sync.release.set()  # let the blocked thread end
    assert hangs_async.calls == 1
    assert hangs_sync.calls == 1
    assert module.raising.displaced == [(["m1"], SESSION)]
    assert module.refusing.displaced == [(["m1"], SESSION)]
    hung = [r.getMessage() for r in caplog.records if "did not return within" in r.getMessage()]
    assert len(hung) == 2
    assert any("listener-hangs-async" in line for line in hung)
    assert any("listener-hangs-sync" in line for line in hung)


async def test_a_tenant_subset_sees_only_its_plugins() -> None:
    module = gates()
    plugins = host("good", "gate-refuses").for_plugins(["good"])
    assert plugins.registry.keys == ("good",)
    assert set(plugins.registry.tool_families) == {"good-tools"}
    assert await plugins.should_handle_turn([], turn("hi")) is True
    assert module.refusing.turns == []


async def test_closing_the_host_closes_every_family_once_even_past_one_that_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    closed: list[str] = []

    def family(name: str, fails: bool = False) -> Contribution[ToolFamily]:
        async def aclose() -> None:
            closed.append(name)
            if fails:
                raise RuntimeError("cannot close")

        item = ToolFamily(name, "A family.", lambda context: [], aclose=aclose)
        return Contribution(item, Provenance("p", "dist", "1.0"))

    families = {"a": family("a", fails=True), "b": family("b"), "c": family("c")}
    families["c"] = Contribution(
        ToolFamily("c", "Holds nothing.", lambda c: []), families["c"].source
    )
    registry = PluginRegistry(tool_families=families)
    with caplog.at_level(logging.ERROR, logger="looping_core.plugins"):
        await PluginHost(registry, pluggy.PluginManager("looping")).aclose()
    assert closed == ["a", "b"]
    assert "plugin 'p' (dist 1.0): tool family 'a' failed to close" in caplog.text
