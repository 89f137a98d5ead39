from looping_core.contract import PluginStore
from looping_core.hookspecs import hookimpl
from lpt_bad.base import contract_version, plugin_info  # noqa: F401


@hookimpl
def stores():
    return [
        PluginStore(
            plugin="table-clash",
            version=1,
            ensure_tables=lambda db, v: None,
            tables=("GOOD_ITEMS",),
        )
    ]
