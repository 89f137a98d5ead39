"""Reads pip-audit's JSON report: lists what it found, fails on any known vulnerability."""

import json
import sys

report, status = sys.argv[1], int(sys.argv[2])
try:
    with open(report) as handle:
        dependencies = json.load(handle)["dependencies"]
except (OSError, ValueError, KeyError) as exc:
    print(f"audit: pip-audit exited {status} without a report ({exc})", file=sys.stderr)
    sys.exit(1)
vulnerable = [d for d in dependencies if d.get("vulns")]
skipped = [d for d in dependencies if "skip_reason" in d]
audited = len(dependencies) - len(skipped)
for dependency in vulnerable:
    for vuln in dependency["vulns"]:
        fixed = ", ".join(vuln.get("fix_versions", [])) or "no fixed version yet"
        print(
            f"audit: {dependency['name']} {dependency['version']}: {vuln['id']} (fixed in {fixed})"
        )
print(
    f"audit: {audited} packages audited, {len(vulnerable)} with known vulnerabilities; "
    f"{len(skipped)} could not be looked up"
)
if skipped:
    print(f"audit: not audited here: {skipped[0]['skip_reason']} (and {len(skipped) - 1} more)")
sys.exit(1 if vulnerable or status not in (0, 1) else 0)
