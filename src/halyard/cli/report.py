"""Terminal output of runs: a progress bar while running, a summary table at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

# How often the progress bar is redrawn; more often only costs time.
PROGRESS_REFRESH_S = 0.1


@contextmanager
def progress_bar(total: int, *, enabled: bool, label: str) -> Iterator:
    """Yields a callback ``(finished, total, cluster_time)``; draws only on a terminal."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield None
        return
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("cluster time {task.fields[clock]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total, clock="0h")
        last = 0.0

        def update(finished: int, known: int, now: float) -> None:
            nonlocal last
            wall = time.monotonic()
            if wall - last >= PROGRESS_REFRESH_S:
                last = wall
                bar.update(task, completed=finished, total=max(total, known), clock=f"{now / 3600:.1f}h")

        yield update


def summary_table(result: Mapping[str, object], title: str) -> Table:
    rows = [
        ("policy", result["policy"]), ("cluster", result["cluster"]),
        ("jobs (completed / in trace)", f"{result['completed']} / {result['jobs']}"),
        ("rejected at submission", result["rejected"]),
        ("average JCT", _hours(result["avg_jct_s"])), ("median JCT", _hours(result["p50_jct_s"])),
        ("p95 / p99 JCT", f"{_hours(result['p95_jct_s'])} / {_hours(result['p99_jct_s'])}"),
        ("average queueing delay", _hours(result["avg_queue_s"])),
        ("makespan", _hours(result["makespan_s"])),
        ("GPU utilisation", f"{100 * float(result['gpu_utilization']):.1f}%"),
        ("preemptions", result["preemptions"]),
        *([("suspensions (opportunistic, Crius §6.1)", result["suspensions"])] if result.get("suspensions") else []),
        *([("exposed communication / run time", f"{100 * float(result['comm_share']):.2f}%")]
          if "comm_share" in result else []),
        ("scheduling passes (avg / p99 / max wall)",
         f"{result['passes']} ({float(result['avg_pass_ms']):.3f} / {float(result.get('p99_pass_ms', 0)):.3f} / "
         f"{float(result.get('max_pass_ms', 0)):.3f} ms)"),
        ("wall time", f"{float(result['wall_s']):.2f} s ({float(result['jobs_per_wall_s']):,.0f} jobs/s)"),
    ]
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for key, value in rows:
        table.add_row(key, str(value))
    return table


def _hours(seconds: object) -> str:
    return f"{float(seconds) / 3600:.2f} h"  # type: ignore[arg-type]
