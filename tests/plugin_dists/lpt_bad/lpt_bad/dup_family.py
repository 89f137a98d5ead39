from looping_core.contract import ModelProvider, ToolFamily
from looping_core.hookspecs import hookimpl
from lpt_bad.base import contract_version, plugin_info  # noqa: F401


@hookimpl
def tool_families():
    return [ToolFamily(name="good-tools", description="d", factory=lambda context: [])]


@hookimpl
def model_providers():
    return [ModelProvider(name="good-models", description="d", factory=lambda model, options: None)]
