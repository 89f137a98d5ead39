"""The built-in `mcp` plugin (`looping-core[mcp]`): Model Context Protocol servers' tools as tool
families, configured in `[plugins.mcp.servers.<name>]`. Imported only when selected.

`looping_core.mcp.plugin` is the plugin the `looping.plugins` entry point names; this package's
public face is its config types.
"""

from looping_core.mcp._config import McpConfig, McpServerConfig

__all__ = ["McpConfig", "McpServerConfig"]
