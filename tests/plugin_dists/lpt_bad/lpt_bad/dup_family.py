from looping_core.contract import ToolFamily
from looping_core.hookspecs import hookimpl
from lpt_bad.base import contract_version, plugin_info  # noqa: F401


@hookimpl
def tool_families():
    return [ToolFamily(name="good-tools", description="d", factory=lambda context: [])]
