import attrs

from looping_core.contract import PluginInfo, SecretRef
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl


@attrs.frozen
class Config:
    api_key: SecretRef | None = None
    region: str = "eu"


@hookimpl
def contract_version():
    return CONTRACT_VERSION


@hookimpl
def plugin_info():
    return PluginInfo(capability="Needs an API key.", config_type=Config, secrets=("api_key",))
