"""`.ci/audit_report.py`: the dependency audit can fail, and one that looked nothing up says
"not run" (exit 3) instead of passing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPORTER = Path(__file__).parents[1] / ".ci" / "audit_report.py"


def judge(
    tmp_path: Path, dependencies: list[dict[str, object]], status: int = 0
) -> tuple[int, str]:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"dependencies": dependencies}))
    done = subprocess.run(
        [sys.executable, str(REPORTER), str(report), str(status)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_a_known_vulnerability_fails(tmp_path: Path) -> None:
    vuln = {"id": "GHSA-x", "fix_versions": ["3.14.3"]}
    code, said = judge(tmp_path, [{"name": "aiohttp", "version": "3.9.0", "vulns": [vuln]}], 1)
    assert code == 1
    assert "aiohttp 3.9.0: GHSA-x (fixed in 3.14.3)" in said


def test_nothing_looked_up_is_not_run_never_a_pass(tmp_path: Path) -> None:
    missing = {"skip_reason": "Dependency not found on PyPI and could not be audited"}
    code, said = judge(
        tmp_path,
        [{"name": "aiohttp", "version": "3.14.5", **missing},
         {"name": "looping-core", "version": "0.1.0", **missing}],
    )  # fmt: skip
    assert code == 3
    assert "0 of 1 packages looked up" in said  # its own distribution is not counted
    assert "NOT RUN" in said


def test_every_package_looked_up_and_clean_passes(tmp_path: Path) -> None:
    own = {"name": "looping-core", "version": "0.1.0", "skip_reason": "not on PyPI"}
    clean = [{"name": "aiohttp", "version": "3.14.5", "vulns": []}, own]
    code, said = judge(tmp_path, clean)
    assert (code, "1 of 1 packages looked up" in said) == (0, True)


def test_a_report_pip_audit_did_not_write_fails(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPORTER), str(tmp_path / "none.json"), "2"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
