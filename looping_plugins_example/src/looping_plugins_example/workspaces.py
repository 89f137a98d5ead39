"""Plugin `example-workspaces`: workspaces as folders under one root directory.

Each (tenant, instance) gets its own folder, named by a hash so no tenant or instance id can
shape the path. Every path is resolved (symlinks followed) and must stay inside that folder: a
symlink that points out, planted by anyone, is refused like `..` would be. Core's caps (path
rules, file and total sizes, file count) apply in front of it, as for any backing.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path

import attrs

from looping_core.contract import PluginInfo, Workspace, WorkspaceBacking
from looping_core.hookspecs import CONTRACT_VERSION, hookimpl


@attrs.frozen
class WorkspacesConfig:
    """`[plugins.example-workspaces]`."""

    root: str = "workspaces"
    """The folder every workspace lives under (made when first needed)."""


class FolderEscape(PermissionError):
    """A path that resolves outside its workspace's folder."""


class FolderWorkspace:
    """One workspace: a folder; files are read and written on a thread."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def _inside(self, path: str) -> Path:
        self._folder.mkdir(parents=True, exist_ok=True)
        base = self._folder.resolve()
        target = (base / path).resolve()
        if not target.is_relative_to(base) or target == base:
            raise FolderEscape(f"{path!r} leads out of the workspace")
        return target

    async def read_bytes(self, path: str) -> bytes:
        return await asyncio.to_thread(lambda: self._inside(path).read_bytes())

    async def write_bytes(self, path: str, data: bytes) -> None:
        def write() -> None:
            target = self._inside(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.parent.resolve().is_relative_to(self._folder.resolve()):
                raise FolderEscape(f"{path!r} leads out of the workspace")
            target.write_bytes(data)

        await asyncio.to_thread(write)

    async def list(self, prefix: str = "") -> Sequence[str]:
        def walk() -> list[str]:
            base = self._folder.resolve()
            if not base.exists():
                return []
            found = []
            for path in base.rglob("*"):
                if path.is_file() and path.resolve().is_relative_to(base):
                    name = path.relative_to(base).as_posix()
                    if name.startswith(prefix):
                        found.append(name)
            return sorted(found)

        return await asyncio.to_thread(walk)


def folder_backing(root: Path) -> WorkspaceBacking:
    def open_workspace(tenant: str, instance_id: str) -> Workspace:
        name = hashlib.sha256(f"{tenant}\0{instance_id}".encode()).hexdigest()[:32]
        return FolderWorkspace(root / name)

    return WorkspaceBacking(
        name="folders", description="Workspaces as folders under one root.", open=open_workspace
    )


@hookimpl
def contract_version() -> int:
    return CONTRACT_VERSION


@hookimpl
def plugin_info() -> PluginInfo:
    return PluginInfo(
        capability="Keeps each agent's workspace in its own folder on disk.",
        config_type=WorkspacesConfig,
    )


@hookimpl
def workspace_backing(config: WorkspacesConfig) -> WorkspaceBacking:
    return folder_backing(Path(config.root))
