"""Print a pip constraints file that pins every dependency of looping-core (the runtime's and
its extras') to the lowest version pyproject.toml allows: `name>=X` becomes `name==X`.

    python3 .ci/floors.py [extra ...] > floors.txt

With extras named, only the runtime dependencies and those extras' are pinned (the test extra's
tools are left to resolve)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

FLOOR = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*(?P<floor>[^,;\s]+)")


def floors(extras: list[str]) -> list[str]:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for requirement in requirements:
        found = FLOOR.match(requirement)
        if found is None:
            raise SystemExit(f"no floor (>=) in {requirement!r}: every dependency needs one")
        marker = requirement.partition(";")[2].strip()
        pin = f"{found['name']}=={found['floor']}" + (f"; {marker}" if marker else "")
        pins[found["name"].lower()] = pin
    return sorted(pins.values())


if __name__ == "__main__":
    print("\n".join(floors(sys.argv[1:])))
