"""The Benchmarks page shows the benchmarks' own results: its tables are what bench/report.py
renders from bench/results/*.json, and each chart names the sha256 of the results it was drawn
from. A results file rerun without `python bench/report.py` (or a table edited by hand) fails
here; matplotlib is not needed to tell."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _report()


def test_every_results_file_has_its_table() -> None:
    results = {path.stem for path in (ROOT / "bench" / "results").glob("*.json")}
    page = report.PAGE.read_text()
    marked = set(re.findall(r"<!-- results: (\w+) -->", page))
    assert results == marked == set(report.TABLES)
    assert set(report.CHARTS) <= results
    for name in report.CHARTS:
        assert f"images/bench-{name.replace('_', '-')}.svg" in page, name


def test_the_tables_are_the_results() -> None:
    page = report.PAGE.read_text()
    assert report.page_with_tables(page) == page, (
        "docs/benchmarks.md does not show bench/results/: run `python bench/report.py`"
    )


def test_each_chart_was_drawn_from_the_results_committed() -> None:
    for name in report.CHARTS:
        chart = (ROOT / "docs" / "images" / f"bench-{name.replace('_', '-')}.svg").read_text()
        assert f"sha256 {report.digest(name)}" in chart, (
            f"docs/images/bench-{name}.svg was drawn from other results: run"
            " `python bench/report.py`"
        )
