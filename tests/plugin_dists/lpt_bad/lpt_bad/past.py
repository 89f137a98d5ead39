from looping_core.hookspecs import hookimpl
from lpt_bad.base import plugin_info  # noqa: F401


@hookimpl
def contract_version():
    return 1
