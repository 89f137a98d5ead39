"""The Benchmarks page's tables and charts, from the benchmarks' own results.

    python bench/send_message.py --bindings jsonrpc --json bench/results/send_message.json
    python bench/send_message.py --bindings grpc --levels 1,16 --workers 1 \\
        --json bench/results/send_message_grpc.json
    python bench/agent_loop.py --json bench/results/agent_loop.json
    python bench/agent_loop.py --durable --json bench/results/agent_loop_durable.json
    python bench/streams.py --rounds 2 --json bench/results/streams.json
    python bench/send_message.py --store postgres --levels 16 --workers 1,2 --rounds 3 \\
        --json bench/results/send_message_postgres.json
    python bench/jobs.py --turns 1000 --workers 1,2 --rounds 3 --json bench/results/jobs.json
    python bench/delegation.py --json bench/results/delegation.json
    python bench/floor.py --json bench/results/floor.json
    python bench/store_turns.py --json bench/results/store_turns.json
    python bench/report.py        # rewrites the tables in docs/benchmarks.md, draws the charts

Each results file is one run's medians as the script printed them (bench/bench_results.py). The
tables go between `<!-- results: NAME -->` and `<!-- end results -->` in docs/benchmarks.md; the
charts are docs/images/bench-NAME.svg, each naming the sha256 of the file it was drawn from, so
a test (tests/docs/test_benchmarks_page.py) can tell that the page shows the committed results
without matplotlib installed. Numbers are copied, never computed here, except the ratios.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
IMAGES = ROOT / "docs" / "images"
MARKED = re.compile(r"(<!-- results: (\w+) -->\n)(.*?)(<!-- end results -->)", re.S)

Results = dict[str, Any]


def load(name: str) -> Results:
    results: Results = json.loads((RESULTS / f"{name}.json").read_text())
    return results


def digest(name: str) -> str:
    """What a chart says it was drawn from."""
    return hashlib.sha256((RESULTS / f"{name}.json").read_bytes()).hexdigest()


def _levels(results: Results) -> list[str]:
    first = next(iter(results["series"].values()))
    return sorted(first, key=int)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _grouped(number: float) -> str:
    return f"{number:,.0f}"


def send_message_table(results: Results) -> str:
    series: dict[str, dict[str, dict[str, float]]] = results["series"]
    levels = _levels(results)
    lines = [
        _row(["", *(f"c={level}" for level in levels), "server CPU per request (c=16)",
              "of it, event loops / other threads", "context switches per request (c=16)",
              "SQL statements per request", "of them, reads and writes (c=16)"]),
        _row(["---"] * (len(levels) + 6)),
    ]  # fmt: skip
    for name, points in series.items():
        counted = [points[level].get("statements") for level in levels]
        statements = " / ".join(f"{count:.1f}" for count in counted if count is not None)
        cpu = f"{points['16']['cpu_ms']:.2f} ms" if "16" in points else ""
        at_16 = points.get("16", {})
        split = (
            f"{at_16['loop_cpu_ms']:.2f} / {at_16['other_cpu_ms']:.2f} ms"
            if "loop_cpu_ms" in at_16 else ""
        )  # fmt: skip
        switches = (
            f"{at_16['loop_switches']:.1f} + {at_16['other_switches']:.1f}"
            if "loop_switches" in at_16 else ""
        )  # fmt: skip
        data = at_16.get("data_statements")
        rps = [f"{_grouped(points[level]['rps'])} req/s" for level in levels]
        lines.append(
            _row([name, *rps, cpu, split, switches, statements,
                  "" if data is None else f"{data:.1f}"])
        )  # fmt: skip
    for name, points in series.items():
        # Each binding against the SDK's server of the same binding.
        peer = "a2a-sdk gRPC" if "gRPC" in name else "a2a-sdk"
        sdk = series.get(peer)
        if not name.startswith("a2a-sdk") and sdk is not None:
            ratios = [f"{points[level]['rps'] / sdk[level]['rps']:.2f}x" for level in levels]
            cpu = f"{points['16']['cpu_ms'] / sdk['16']['cpu_ms']:.2f}x" if "16" in points else ""
            lines.append(_row([f"{name} / {peer}", *ratios, cpu, "", "", "", ""]))
    return "\n".join(lines) + "\n"


def agent_loop_table(results: Results) -> str:
    series: dict[str, dict[str, dict[str, float]]] = results["series"]
    levels = _levels(results)
    lines = [
        _row(["", *(f"c={level}" for level in levels),
              f"CPU per turn ({' / '.join(f'c={level}' for level in levels)})"]),
        _row(["---"] * (len(levels) + 2)),
    ]  # fmt: skip
    for name, points in series.items():
        cells = [
            f"{point['turns_per_second']:.1f} turns/s (p50 {point['p50_ms']:.0f} ms)"
            for point in (points[level] for level in levels)
        ]
        cpu = " / ".join(f"{points[level]['cpu_ms']:.1f}" for level in levels) + " ms"
        lines.append(_row([name, *cells, cpu]))
    ours, theirs = series["looping-core"], series["pydantic-ai"]
    ratios = [
        f"{ours[level]['turns_per_second'] / theirs[level]['turns_per_second']:.2f}x"
        for level in levels
    ]
    cpu = " / ".join(f"{ours[level]['cpu_ms'] / theirs[level]['cpu_ms']:.2f}" for level in levels)
    lines.append(_row(["looping-core / pydantic-ai", *ratios, cpu]))
    return "\n".join(lines) + "\n"


def streams_table(results: Results) -> str:
    lines = [
        _row(["", "events/s", "delay p50", "delay p99", "server CPU"]),
        _row(["---"] * 5),
    ]
    for workers, shapes in results["series"].items():
        for shape, point in shapes.items():
            lines.append(_row([
                f"{workers}, {shape}", _grouped(point["events_per_second"]),
                f"{point['p50_ms']:.1f} ms", f"{point['p99_ms']:.0f} ms",
                f"{point['cpu_share']:.0%}",
            ]))  # fmt: skip
    return "\n".join(lines) + "\n"


def jobs_table(results: Results) -> str:
    lines = [
        _row(["workers", "accepted/s", "completed/s", "pushed/s", "commits per turn",
              "backlog drained/s", "procrastinate no-op jobs/s", "completed / no-op",
              "drained / no-op"]),
        _row(["---"] * 9),
    ]  # fmt: skip
    for workers, point in results["series"]["looping-core"].items():
        ceiling = point["noop_jobs_per_second"]
        lines.append(_row([
            workers, _grouped(point["accepted_per_second"]),
            _grouped(point["completed_per_second"]), _grouped(point["pushed_per_second"]),
            f"{point['commits_per_turn']:.1f}", _grouped(point["drained_per_second"]),
            _grouped(ceiling), f"{point['completed_per_second'] / ceiling:.2f}x",
            f"{point['drained_per_second'] / ceiling:.2f}x",
        ]))  # fmt: skip
    costs = {
        w: p for w, p in results["series"]["looping-core"].items() if "statements_per_turn" in p
    }
    if costs:
        lines += ["", _row(["workers", "PostgreSQL CPU per turn", "statements per turn",
                            "of them procrastinate's", "of their execution time"]),
                  _row(["---"] * 5)]  # fmt: skip
        for workers, point in costs.items():
            lines.append(_row([
                workers, f"{point['postgres_cpu_ms_per_turn']:.2f} ms",
                f"{point['statements_per_turn']:.1f}",
                f"{point['procrastinate_statement_share']:.0%}",
                f"{point['procrastinate_time_share']:.0%}",
            ]))  # fmt: skip
    recovery = results.get("recovery_seconds")
    if recovery is not None:
        lines += ["", f"A killed worker's 16 turns were taken up by the other {recovery:.1f} s "
                      "after the SIGKILL."]  # fmt: skip
    return "\n".join(lines) + "\n"


def delegation_table(results: Results) -> str:
    lines = [
        _row(["subtasks", "wall per turn", "of which the model's", "overhead per subtask",
              "CPU per subtask", "dependency done to dependant started (p50)"]),
        _row(["---"] * 6),
    ]  # fmt: skip
    for subtasks, point in results["series"]["RoundAgent"].items():
        lines.append(_row([
            f"{subtasks} in {results['waves']} waves, {results['parallel']} at once",
            f"{point['wall_ms']:.0f} ms", f"{point['model_ms']:.0f} ms",
            f"{point['overhead_ms_per_subtask']:.2f} ms", f"{point['cpu_ms_per_subtask']:.2f} ms",
            f"{point['dispatch_p50_ms']:.2f} ms",
        ]))  # fmt: skip
    return "\n".join(lines) + "\n"


def floor_table(results: Results) -> str:
    parts = results["series"]["cpu_ms"]["1"]
    names = {
        "token": "a gateway token verified (the key set cached)",
        "http": f"an HTTP exchange, bare aiohttp (c={results['concurrency']})",
        "sqlite": "a turn's SQLite statements (5 INSERTs, 1 UPDATE ... RETURNING;"
        " 16 turns per commit)",
        "floor": "the floor: their sum",
    }
    lines = [_row(["part of one SendMessage", "CPU"]), _row(["---"] * 2)]
    lines += [_row([names[name], f"{ms:.3f} ms"]) for name, ms in parts.items()]
    return "\n".join(lines) + "\n"


def lean_table(results: Results) -> str:
    """The servers of one run at c=16 against the floor and the lean reference server."""
    series: dict[str, dict[str, dict[str, float]]] = results["series"]
    floor, lean = results["floor_ms"], series["lean reference"]["16"]["cpu_ms"]
    lines = [
        _row(["server", "requests/s", "CPU per request", "of it, event loop / other threads",
              "over the floor", "over the lean reference (round by round)"]),
        _row(["---"] * 6),
        _row(["the floor (bench/floor.py, in the same run)", "", f"{floor:.3f} ms", "", "1.00x",
              ""]),
    ]  # fmt: skip
    for name, points in series.items():
        point = points["16"]
        rounds = results.get("cpu_over_lean", {}).get(name, {}).get("16", [])
        # The median of the rounds' own ratios where the run kept them (the servers ran back to
        # back in each round), else the ratio of the medians.
        over_lean = (
            f"{statistics.median(rounds):.2f}x ({', '.join(f'{r:.2f}x' for r in rounds)})"
            if rounds else f"{point['cpu_ms'] / lean:.2f}x"
        )  # fmt: skip
        lines.append(_row([
            name, _grouped(point["rps"]), f"{point['cpu_ms']:.3f} ms",
            f"{point['loop_cpu_ms']:.2f} / {point['other_cpu_ms']:.2f} ms",
            f"{point['cpu_ms'] / floor:.2f}x", over_lean,
        ]))  # fmt: skip
    return "\n".join(lines) + "\n"


def store_turns_table(results: Results) -> str:
    lines = [
        _row(["task and context ids", "store thread CPU per turn", "event loop CPU per turn",
              "wall time per turn"]),
        _row(["---"] * 4),
    ]  # fmt: skip
    for name, points in results["series"].items():
        point = next(iter(points.values()))
        lines.append(_row([name, f"{point['store_ms']:.3f} ms", f"{point['loop_ms']:.3f} ms",
                           f"{point['wall_ms']:.3f} ms"]))  # fmt: skip
    return "\n".join(lines) + "\n"


TABLES: dict[str, Callable[[Results], str]] = {
    "send_message": send_message_table,
    "send_message_postgres": send_message_table,
    "send_message_grpc": send_message_table,
    "agent_loop": agent_loop_table,
    "agent_loop_durable": agent_loop_table,
    "streams": streams_table,
    "jobs": jobs_table,
    "delegation": delegation_table,
    "floor": floor_table,
    "send_message_lean": lean_table,
    "store_turns": store_turns_table,
}

CHARTS: dict[str, tuple[str, str, str]] = {
    # name: (the measurement per series, its axis label, the chart's title); where a curve says
    # more than the table
    "send_message": ("rps", "requests/s", "Authenticated SendMessage, SQLite"),
    "agent_loop": ("turns_per_second", "turns/s", "Agent turns (3 tool rounds each)"),
}
CPU_LABELS = {"send_message": "server CPU per request", "agent_loop": "CPU per turn"}


def page_with_tables(page: str) -> str:
    """docs/benchmarks.md with each marked table rendered from its results."""

    def table(found: re.Match[str]) -> str:
        return found[1] + "\n" + TABLES[found[2]](load(found[2])) + "\n" + found[4]

    return MARKED.sub(table, page)


def draw(name: str) -> Path:
    """One chart: the measurement per concurrency level, and the CPU each unit of work cost."""
    # Imported here: the tables (and the test that reads them) need no matplotlib.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("svg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    # The same results give the same bytes: fixed ids, no date, text left as text.
    plt.rcParams.update({"svg.hashsalt": "looping-core", "svg.fonttype": "none",
                         "font.size": 10, "axes.spines.top": False,
                         "axes.spines.right": False})  # fmt: skip
    results = load(name)
    measure, label, title = CHARTS[name]
    levels = _levels(results)
    series = results["series"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    width = 0.8 / len(series)
    for index, (series_name, points) in enumerate(series.items()):
        offsets = [position + (index - (len(series) - 1) / 2) * width for position in
                   range(len(levels))]  # fmt: skip
        left.bar(offsets, [points[level][measure] for level in levels], width, label=series_name)
        right.bar(offsets, [points[level]["cpu_ms"] for level in levels], width)
    for axes, axis_label in ((left, label), (right, "ms")):
        axes.set_xticks(range(len(levels)), [f"{level} at once" for level in levels])
        axes.set_ylabel(axis_label)
        axes.grid(axis="y", alpha=0.3)
    left.set_title(f"{title}: {label}, higher is better", fontsize=10)
    right.set_title(f"{CPU_LABELS[name]}, lower is better", fontsize=10)
    figure.legend(loc="outside lower center", ncols=len(series), frameon=False)
    target = IMAGES / f"bench-{name.replace('_', '-')}.svg"
    described = (
        f"Drawn by bench/report.py from bench/results/{name}.json "
        f"(sha256 {digest(name)}), {results['date']}, {results['cpus']} CPUs."
    )
    figure.savefig(target, metadata={"Date": None, "Description": described})
    plt.close(figure)
    return target


def main() -> None:
    for name in TABLES:
        if not (RESULTS / f"{name}.json").exists():
            sys.exit(f"no results for {name}: run its command, as this script's docstring lists")
    PAGE.write_text(page_with_tables(PAGE.read_text()))
    print(f"tables rewritten in {PAGE.relative_to(ROOT)}")
    for name in CHARTS:
        print(f"drew {draw(name).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
