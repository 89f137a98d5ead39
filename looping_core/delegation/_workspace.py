"""Workspaces: the file area each subagent works in, with caps core enforces whatever the backing.

`GuardedWorkspace` wraps any `Workspace` (a plugin's backing, or the `MemoryBacking` core ships
as the default) and refuses, with a `WorkspaceError` naming the rule, a path that is not a plain
relative one (absolute, `..`, empty parts, NUL or other control characters, backslashes, a
Windows drive or a reserved device name), a file over `max_file_bytes`, a write that would take
the workspace over `max_total_bytes`, and a new file beyond `max_files`. A tool that hits one
gets the error as its result (the tool loop shows the message), never a crash.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import attrs

from looping_core.contract import Workspace, WorkspaceBacking
from looping_core.errors import LoopingError

__all__ = [
    "GuardedWorkspace",
    "MemoryBacking",
    "WorkspaceError",
    "WorkspaceLimits",
    "check_path",
    "memory_backing",
]

_RESERVED = re.compile(r"^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?$", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class WorkspaceError(LoopingError):
    """A workspace refused a path or a write; the message says which rule."""


@attrs.frozen
class WorkspaceLimits:
    max_file_bytes: int = 10 * 1024 * 1024
    max_total_bytes: int = 100 * 1024 * 1024
    max_files: int = 1000
    max_path_chars: int = 512


def check_path(path: str, limits: WorkspaceLimits = WorkspaceLimits()) -> str:
    """`path` if it is a plain relative path inside the workspace; `WorkspaceError` otherwise."""
    if not path or len(path) > limits.max_path_chars:
        raise WorkspaceError(f"a path has 1 to {limits.max_path_chars} characters")
    if _CONTROL.search(path):
        raise WorkspaceError("a path holds no NUL or other control characters")
    if "\\" in path or re.match(r"^[A-Za-z]:", path):
        raise WorkspaceError("a path uses '/' and names no drive")
    if path.startswith("/"):
        raise WorkspaceError("a path is relative to the workspace, not absolute")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise WorkspaceError("a path has no empty, '.' or '..' parts")
        if _RESERVED.match(part) or part.endswith((" ", ".")):
            raise WorkspaceError(f"a path part may not be the reserved name {part!r}")
    return path


class GuardedWorkspace:
    """A workspace with core's caps in front of whatever backs it."""

    def __init__(self, inner: Workspace, limits: WorkspaceLimits = WorkspaceLimits()) -> None:
        self._inner = inner
        self._limits = limits
        self._sizes: dict[str, int] | None = None

    async def _known_sizes(self) -> dict[str, int]:
        if self._sizes is None:
            self._sizes = {
                path: len(await self._inner.read_bytes(path)) for path in await self._inner.list()
            }
        return self._sizes

    async def read_bytes(self, path: str) -> bytes:
        return await self._inner.read_bytes(check_path(path, self._limits))

    async def write_bytes(self, path: str, data: bytes) -> None:
        check_path(path, self._limits)
        limits = self._limits
        if len(data) > limits.max_file_bytes:
            raise WorkspaceError(f"a file holds at most {limits.max_file_bytes} bytes")
        sizes = await self._known_sizes()
        if path not in sizes and len(sizes) >= limits.max_files:
            raise WorkspaceError(f"a workspace holds at most {limits.max_files} files")
        total = sum(sizes.values()) - sizes.get(path, 0) + len(data)
        if total > limits.max_total_bytes:
            raise WorkspaceError(f"a workspace holds at most {limits.max_total_bytes} bytes")
        await self._inner.write_bytes(path, data)
        sizes[path] = len(data)

    async def list(self, prefix: str = "") -> Sequence[str]:
        if prefix:
            check_path(prefix.rstrip("/"), self._limits)
        return await self._inner.list(prefix)


class MemoryBacking:
    """Workspaces in memory, one per (tenant, instance): the default when no plugin backs them.
    They last as long as the process."""

    def __init__(self) -> None:
        self._spaces: dict[tuple[str, str], _MemoryWorkspace] = {}

    def open(self, tenant: str, instance_id: str) -> Workspace:
        return self._spaces.setdefault((tenant, instance_id), _MemoryWorkspace())


class _MemoryWorkspace:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    async def read_bytes(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise WorkspaceError(f"no file {path!r}") from None

    async def write_bytes(self, path: str, data: bytes) -> None:
        self.files[path] = bytes(data)

    async def list(self, prefix: str = "") -> Sequence[str]:
        return sorted(p for p in self.files if p.startswith(prefix))


def memory_backing() -> WorkspaceBacking:
    """The memory backing as a `WorkspaceBacking`."""
    backing = MemoryBacking()
    opener: Callable[[str, str], Workspace] = backing.open
    return WorkspaceBacking(
        name="memory", description="Workspaces in this process's memory.", open=opener
    )
