"""A plugin written for contract 2: its tool's handler takes the arguments only, and reads the
call from `current_tool_call()`, which contract 3 removed."""

from looping_core.contract import Tool, ToolFamily
from looping_core.hookspecs import hookimpl
from lpt_bad.base import plugin_info  # noqa: F401


@hookimpl
def contract_version():
    return 2


async def _handler(arguments):
    from looping_core.contract import current_tool_call  # noqa: PLC0415 - gone in contract 3

    return current_tool_call().id


@hookimpl
def tool_families():
    raise AssertionError("never called: the contract version did not match")
    return [ToolFamily("two-tools", "Old tools.", lambda context: [Tool("old", "", {}, _handler)])]
