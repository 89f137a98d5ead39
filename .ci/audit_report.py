"""Reads pip-audit's JSON report. Exit 0: every dependency was looked up and none has a known
vulnerability; 1: a known vulnerability (or pip-audit failed); 3: the audit could not run here
(no package could be looked up, or some could not), which `.ci/run` shows as a warning. A check
that cannot look anything up must never pass as if it had."""

import json
import sys

OWN = {"looping-core", "looping-plugins-example"}
"""This project's own distributions: not on the index, so never looked up."""
NOT_RUN = 3

report, status = sys.argv[1], int(sys.argv[2])
try:
    with open(report) as handle:
        dependencies = json.load(handle)["dependencies"]
except (OSError, ValueError, KeyError) as exc:
    print(f"audit: pip-audit exited {status} without a report ({exc})", file=sys.stderr)
    sys.exit(1)
theirs = [d for d in dependencies if d["name"].lower() not in OWN]
vulnerable = [d for d in theirs if d.get("vulns")]
skipped = [d for d in theirs if "skip_reason" in d]
audited = len(theirs) - len(skipped)
for dependency in vulnerable:
    for vuln in dependency["vulns"]:
        fixed = ", ".join(vuln.get("fix_versions", [])) or "no fixed version yet"
        print(
            f"audit: {dependency['name']} {dependency['version']}: {vuln['id']} (fixed in {fixed})"
        )
print(
    f"audit: {audited} of {len(theirs)} packages looked up, {len(vulnerable)} with known "
    f"vulnerabilities; {len(skipped)} could not be looked up"
)
if vulnerable or status not in (0, 1):
    sys.exit(1)
if skipped:
    names = ", ".join(sorted(d["name"] for d in skipped)[:5])
    print(
        f"audit: NOT RUN for {len(skipped)} packages ({names}...): {skipped[0]['skip_reason']}",
        file=sys.stderr,
    )
    sys.exit(NOT_RUN)
