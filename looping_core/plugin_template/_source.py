"""Where this looping-core was installed from, so a generated project installs the same one,
on this machine and on a CI runner.

A release from an index is a requirement by name: the project's own dependency names it, and
any machine's pip finds it where this one did. A VCS install (`pip install git+URL@rev`) is one
any machine can repeat: PEP 610's `direct_url.json` records the URL and the commit. An editable
or path install (a clone) is on this machine only: its commands here install looping-core from
that folder, and its CI gets a line marked for the user to fill in (no runner can reach it)."""

from __future__ import annotations

import importlib.metadata
import json
import urllib.parse
from pathlib import Path

import attrs

__all__ = ["CI_PLACEHOLDER", "CoreSource", "core_link", "core_source"]

CI_PLACEHOLDER = "git+https://FILL-IN.invalid/looping-core"
"""Where a generated CI installs looping-core from when nothing here says where a runner could:
a URL that fails with its own name in the error until the user fills it in."""


@attrs.frozen
class CoreSource:
    """`path`: the folder looping-core was installed from (`None`: an index or a VCS);
    `editable`: installed with `pip install -e`; `vcs`: a VCS requirement URL with its commit
    (`git+https://host/repo@<commit>`), when it was installed from one."""

    path: Path | None = None
    editable: bool = False
    vcs: str | None = None

    def pip_argument(self, extras: str = "") -> str:
        """What `pip install` takes for it on this machine, shell-quoted: `'-e /path[extras]'`,
        a VCS requirement, or nothing when the project's own dependency names it (an index)."""
        if self.vcs is not None:
            return self._vcs_requirement(self.vcs, extras)
        if self.path is None:
            return ""
        spec = f"'{self.path}[{extras}]'" if extras else f"'{self.path}'"
        return f"-e {spec}" if self.editable else spec

    def ci_argument(self, extras: str = "") -> str:
        """What a CI runner's `pip install` takes for it: nothing (an index), the VCS
        requirement, or, installed from a folder here, the placeholder (`reachable` false)."""
        if self.path is not None:
            return self._vcs_requirement(CI_PLACEHOLDER, extras)
        return self.pip_argument(extras)

    @property
    def reachable(self) -> bool:
        """Whether a CI runner can install it the way it was installed here."""
        return self.path is None

    @staticmethod
    def _vcs_requirement(url: str, extras: str) -> str:
        name = f"looping-core[{extras}]" if extras else "looping-core"
        return f"'{name} @ {url}'"


def core_source(search: list[str] | None = None) -> CoreSource:
    """How the running looping-core was installed (`search`: other folders to look in)."""
    dists = (
        importlib.metadata.distributions(name="looping-core", path=search)
        if search is not None
        else importlib.metadata.distributions(name="looping-core")
    )
    for dist in dists:
        text = dist.read_text("direct_url.json")
        if not text:
            continue  # an egg-info in the working folder, or a wheel from an index
        found = json.loads(text)
        url = str(found.get("url", ""))
        vcs_info = found.get("vcs_info")
        if isinstance(vcs_info, dict) and vcs_info.get("commit_id"):
            return CoreSource(vcs=f"{vcs_info.get('vcs', 'git')}+{url}@{vcs_info['commit_id']}")
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme != "file" or "dir_info" not in found:
            continue  # a wheel or an archive: nothing a project could install again
        path = Path(urllib.parse.unquote(parsed.path))
        return CoreSource(path, bool(found["dir_info"].get("editable", False)))
    return CoreSource()


_LINKED = ("repository", "source", "documentation", "homepage")
"""The project URLs a generated README may link to, in the order tried."""


def core_link() -> str:
    """`looping-core` as a Markdown link to its repository or documentation, as the installed
    release names them (`Project-URL`); plain text when it names none: a generated README never
    links to a page that may not exist."""
    try:
        urls = importlib.metadata.metadata("looping-core").get_all("Project-URL") or []
    except importlib.metadata.PackageNotFoundError:
        return "looping-core"
    named = {}
    for entry in urls:
        label, _, url = str(entry).partition(",")
        named[label.strip().lower()] = url.strip()
    for label in _LINKED:
        if named.get(label, "").startswith("https://"):
            return f"[looping-core]({named[label]})"
    return "looping-core"
