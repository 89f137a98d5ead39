from looping_core.hookspecs import hookimpl
from lpt_bad.base import plugin_info  # noqa: F401


@hookimpl
def contract_version():
    return 4


@hookimpl
def tool_families():
    raise AssertionError("never called: the contract version did not match")
