from looping_core.hookspecs import hookimpl
from lpt_bad.base import contract_version, plugin_info  # noqa: F401


@hookimpl
def tool_families(config, tenant):
    return []
