"""A valid plugin: the others clash with what it contributes."""

import attrs

from looping_core.contract import (
    ModelProvider,
    PluginInfo,
    PluginStore,
    SubtaskRecipe,
    SubtaskType,
    ToolFamily,
)
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl


@attrs.frozen
class Params:
    topic: str


@hookimpl
def contract_version():
    return CONTRACT_VERSION


@hookimpl
def plugin_info():
    return PluginInfo(capability="A valid plugin for the host's tests.")


@hookimpl
def tool_families():
    return [ToolFamily(name="good-tools", description="d", factory=lambda context: [])]


@hookimpl
def subtask_types():
    return [
        SubtaskType(
            key="good-subtask",
            description="d",
            params_type=Params,
            recipe=lambda params: SubtaskRecipe(instructions="i"),
        )
    ]


@hookimpl
def stores():
    return [
        PluginStore(
            plugin="good", version=1, ensure_tables=lambda db, v: None, tables=("good_items",)
        )
    ]


@hookimpl
def model_providers():
    return [ModelProvider(name="good-models", description="d", factory=lambda model, options: None)]
