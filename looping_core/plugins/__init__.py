"""The plugin host: discovery through entry points, selection, validation, and the registry.

installed = discover_plugins()            # metadata only, nothing imported
host = PluginHost.load(config)            # imports the selected ones; raises PluginProblems
host.registry.tool_families["notes"]      # Contribution(item=ToolFamily, source=Provenance)
await host.should_handle_turn(history, turn)
"""

from looping_core.plugins._discovery import InstalledPlugin, discover_plugins
from looping_core.plugins._host import PluginHost
from looping_core.plugins._listing import PluginListing, list_plugins
from looping_core.plugins._loader import load_plugins
from looping_core.plugins._registry import Contribution, LoadedPlugin, PluginRegistry, Provenance

__all__ = [
    "Contribution",
    "InstalledPlugin",
    "LoadedPlugin",
    "PluginHost",
    "PluginListing",
    "PluginRegistry",
    "Provenance",
    "discover_plugins",
    "list_plugins",
    "load_plugins",
]
