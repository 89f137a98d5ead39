"""Two plugin objects (classes' instances) that both provide a workspace backing."""

from looping_core.contract import PluginInfo, WorkspaceBacking
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl


class _Backing:
    def __init__(self, name):
        self.name = name

    @hookimpl
    def contract_version(self):
        return CONTRACT_VERSION

    @hookimpl
    def plugin_info(self):
        return PluginInfo(capability=f"Workspaces in {self.name}.")

    @hookimpl
    def workspace_backing(self):
        return WorkspaceBacking(name=self.name, description="d", open=lambda tenant, instance: None)


first = _Backing("disk")
second = _Backing("bucket")
