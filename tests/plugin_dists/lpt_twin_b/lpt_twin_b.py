from looping_core.contract import PluginInfo
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl


@hookimpl
def contract_version():
    return CONTRACT_VERSION


@hookimpl
def plugin_info():
    return PluginInfo(capability="One of two plugins with the key 'twin'.")
