"""The folder workspace backing cannot be led out of its folder, symlinks included; core's guard
in front of it refuses bad paths and caps before the backing sees them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from looping_plugins_example.workspaces import FolderEscape, folder_backing

from looping_core.config import Config, PluginsConfig
from looping_core.delegation import GuardedWorkspace, WorkspaceError, WorkspaceLimits
from looping_core.plugins import PluginHost


async def test_files_live_in_each_instances_own_folder(tmp_path: Path) -> None:
    backing = folder_backing(tmp_path / "root")
    mine, theirs = backing.open("t", "alice"), backing.open("t", "bob")
    await mine.write_bytes("notes/today.txt", b"milk")
    assert await mine.read_bytes("notes/today.txt") == b"milk"
    assert await mine.list() == ["notes/today.txt"]
    assert await theirs.list() == []
    with pytest.raises(FileNotFoundError):
        await theirs.read_bytes("notes/today.txt")


async def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"do not read")
    outside = tmp_path / "outside"
    outside.mkdir()
    backing = folder_backing(tmp_path / "root")
    space = backing.open("t", "alice")
    await space.write_bytes("a.txt", b"x")  # makes the folder
    folder = next((tmp_path / "root").iterdir())
    os.symlink(secret, folder / "link.txt")
    os.symlink(outside, folder / "door")
    with pytest.raises(FolderEscape):
        await space.read_bytes("link.txt")
    with pytest.raises(FolderEscape):
        await space.write_bytes("link.txt", b"overwritten")
    with pytest.raises(FolderEscape):
        await space.write_bytes("door/planted.txt", b"x")
    with pytest.raises(FolderEscape):
        await space.read_bytes("../secret.txt")  # the backing refuses it even unguarded
    assert secret.read_bytes() == b"do not read"
    assert list(outside.iterdir()) == []
    assert await space.list() == ["a.txt"]  # what lies outside is not listed


async def test_the_guard_stops_bad_paths_and_caps_before_the_backing(tmp_path: Path) -> None:
    inner = folder_backing(tmp_path / "root").open("t", "alice")
    space = GuardedWorkspace(inner, WorkspaceLimits(max_file_bytes=4))
    with pytest.raises(WorkspaceError):
        await space.write_bytes("../../etc/x", b"x")
    with pytest.raises(WorkspaceError, match="at most 4 bytes"):
        await space.write_bytes("big.bin", b"12345")
    assert not (tmp_path / "root").exists() or await inner.list() == []


def test_the_plugin_provides_the_backing_with_its_root() -> None:
    config = Config(
        plugins=PluginsConfig(
            enabled=("example-workspaces",),
            settings={"example-workspaces": {"root": "/tmp/looping-workspaces"}},
        )
    )
    host = PluginHost.load(config, environ={})
    backing = host.registry.workspace_backing
    assert backing is not None
    assert backing.item.name == "folders"
