"""Where this looping-core was installed from, so a generated project installs the same one.

A release from an index is a requirement by name. An editable or path install (a clone) is not
on any index: a generated project that asked for it by name would ask the index for it, and get
another version or nothing. Then its commands install looping-core from that path, the way it is
installed here (PEP 610's `direct_url.json` says which)."""

from __future__ import annotations

import importlib.metadata
import json
import urllib.parse
from pathlib import Path

import attrs

__all__ = ["CoreSource", "core_source"]


@attrs.frozen
class CoreSource:
    """`path`: the folder looping-core was installed from (`None`: an index); `editable`:
    installed with `pip install -e`."""

    path: Path | None = None
    editable: bool = False

    def pip_argument(self, extras: str = "") -> str:
        """What `pip install` takes for it, shell-quoted: `'-e /path[extras]'`, or nothing
        when the project's own dependency names it (an index)."""
        if self.path is None:
            return ""
        spec = f"'{self.path}[{extras}]'" if extras else f"'{self.path}'"
        return f"-e {spec}" if self.editable else spec


def core_source() -> CoreSource:
    """How the running looping-core was installed."""
    for dist in importlib.metadata.distributions(name="looping-core"):
        text = dist.read_text("direct_url.json")
        if not text:
            continue  # an egg-info in the working folder, or a wheel from an index
        found = json.loads(text)
        url = urllib.parse.urlparse(str(found.get("url", "")))
        if url.scheme != "file" or "dir_info" not in found:
            continue  # a wheel or an archive: nothing a project could install again
        path = Path(urllib.parse.unquote(url.path))
        return CoreSource(path, bool(found["dir_info"].get("editable", False)))
    return CoreSource()
