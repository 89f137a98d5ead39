"""What a run of a dataset says: a table for a person, JSON for a program, JUnit XML for CI, and
whether it passed (every run of every case, or at least `min_pass_rate` of them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from xml.etree import ElementTree

import attrs

from looping_core.evals._running import CaseResult

__all__ = ["Summary", "failure_lines", "junit_xml", "report_json", "summarize", "table"]


@attrs.frozen
class Summary:
    runs: int
    passed: int

    @property
    def rate(self) -> float:
        return self.passed / self.runs if self.runs else 0.0

    def met(self, min_pass_rate: float | None) -> bool:
        """Every run passed, or (with `min_pass_rate`) at least that share of them."""
        if min_pass_rate is None:
            return self.runs > 0 and self.passed == self.runs
        return self.rate >= min_pass_rate


def summarize(results: Sequence[CaseResult]) -> Summary:
    return Summary(len(results), sum(result.passed for result in results))


def _by_case(results: Sequence[CaseResult]) -> dict[str, list[CaseResult]]:
    cases: dict[str, list[CaseResult]] = {}
    for result in results:
        cases.setdefault(result.name, []).append(result)
    return cases


def table(results: Sequence[CaseResult]) -> str:
    """One row a case: runs passed, checks passed, tokens, cost and seconds (over its runs)."""
    rows = [("case", "passed", "checks", "tokens", "cost", "seconds")]
    for name, runs in _by_case(results).items():
        checks = [check for run in runs for check in run.checks]
        costs = [run.cost for run in runs if run.cost is not None]
        rows.append(
            (
                name,
                f"{sum(run.passed for run in runs)}/{len(runs)}",
                f"{sum(c.passed for c in checks)}/{len(checks)}",
                str(sum(run.tokens for run in runs) // len(runs)),
                f"{sum(costs) / len(costs):.4f}" if costs else "-",
                f"{sum(run.seconds for run in runs) / len(runs):.2f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    summary = summarize(results)
    lines.append(f"{summary.passed} of {summary.runs} runs passed ({summary.rate:.0%})")
    return "\n".join(line.rstrip() for line in lines)


def failure_lines(results: Sequence[CaseResult]) -> list[str]:
    """Each failed run: the case, the check, what it expected and what it got."""
    lines = []
    for result in results:
        where = f"{result.name} (run {result.run})"
        if result.error is not None:
            lines.append(f"{where}: {result.error}")
        for check in result.failures:
            lines.append(f"{where}: {check.said}")
    return lines


def report_json(results: Sequence[CaseResult], min_pass_rate: float | None) -> dict[str, Any]:
    summary = summarize(results)
    return {
        "runs": summary.runs,
        "passed": summary.passed,
        "passRate": summary.rate,
        "met": summary.met(min_pass_rate),
        "cases": [
            {
                "name": result.name,
                "run": result.run,
                "passed": result.passed,
                "error": result.error,
                "tokens": result.tokens,
                "cost": result.cost,
                "seconds": round(result.seconds, 3),
                "turns": [
                    {
                        "taskId": turn.outcome.task.get("id"),
                        "state": turn.outcome.task.get("status", {}).get("state"),
                        "checks": [attrs.asdict(check) for check in turn.checks],
                    }
                    for turn in result.turns
                ],
            }
            for result in results
        ],
    }


def junit_xml(results: Sequence[CaseResult], suite: str) -> str:
    """A JUnit report: a test case a run, a failure naming each failed check."""
    summary = summarize(results)
    root = ElementTree.Element(
        "testsuite",
        name=suite,
        tests=str(summary.runs),
        failures=str(sum(1 for r in results if r.error is None and not r.passed)),
        errors=str(sum(1 for r in results if r.error is not None)),
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        case = ElementTree.SubElement(
            root,
            "testcase",
            classname=suite,
            name=f"{result.name} [run {result.run}]",
            time=f"{result.seconds:.3f}",
        )
        if result.error is not None:
            ElementTree.SubElement(case, "error", message=result.error)
        elif result.failures:
            said = [check.said for check in result.failures]
            failure = ElementTree.SubElement(case, "failure", message=said[0])
            failure.text = "\n".join(said)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
