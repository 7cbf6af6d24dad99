"""Terminal output of runs: a progress bar while running, a summary table at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, SupportsFloat, SupportsIndex

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from halyard.cli import EXIT_RUN_REJECTED
from halyard.plural import plural

if TYPE_CHECKING:
    from halyard.datamodel import Cluster, JobSpec
    from halyard.scheduling.simulator import Rejected

# How often the progress bar is redrawn; more often only costs time.
PROGRESS_REFRESH_S = 0.1
SHOWN_REJECTED = 5  # rejection lines printed before the count of the rest


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
        ("average JCT", _hours(result, "avg_jct_s")), ("median JCT", _hours(result, "p50_jct_s")),
        ("p95 / p99 JCT", f"{_hours(result, 'p95_jct_s')} / {_hours(result, 'p99_jct_s')}"),
        ("average queueing delay", _hours(result, "avg_queue_s")),
        ("makespan", _hours(result, "makespan_s")),
        ("GPU utilisation", f"{100 * _number(result, 'gpu_utilization'):.1f}%"),
        ("preemptions", result["preemptions"]),
        *([("suspensions (opportunistic, Crius §6.1)", result["suspensions"])] if result.get("suspensions") else []),
        *([("exposed communication / run time", f"{100 * _number(result, 'comm_share'):.2f}%")]
          if "comm_share" in result else []),
        ("scheduling passes (avg / p99 / max wall)",
         f"{result['passes']} ({_number(result, 'avg_pass_ms'):.3f} / {_number(result, 'p99_pass_ms', 0):.3f} / "
         f"{_number(result, 'max_pass_ms', 0):.3f} ms)"),
        ("wall time", f"{_number(result, 'wall_s'):.2f} s ({_number(result, 'jobs_per_wall_s'):,.0f} jobs/s)"),
    ]
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for key, value in rows:
        table.add_row(key, str(value))
    return table


def _number(result: Mapping[str, object], key: str, default: float | None = None) -> float:
    """``result[key]`` (or ``default`` where given and the key is absent) as a float. A summary holds
    names and numbers under one value type; a value ``float()`` cannot take is a bug in the summary, so
    this raises the ``TypeError`` ``float()`` would, naming the key."""
    value = result[key] if default is None else result.get(key, default)
    if not isinstance(value, str | SupportsFloat | SupportsIndex):
        raise TypeError(f"summary {key!r} is {value!r}, not a number")
    return float(value)


def _hours(result: Mapping[str, object], key: str) -> str:
    return f"{_number(result, key) / 3600:.2f} h"


def warn_unmet_reliance(policy: object, jobs: Sequence[JobSpec], cluster: Cluster, *, strict: bool,
                        console: Console, command: str) -> int:
    """Warn (on ``console``) when ``policy`` relies on something no job of the run, or the cluster, has
    (:func:`halyard.policies.unmet_reliance`): it would silently act as its base stages. Under ``strict``
    that is an error: the status is :data:`EXIT_RUN_REJECTED` (the caller stops before running); else 0."""
    from halyard.policies import unmet_reliance

    lines = unmet_reliance(policy, jobs, cluster)
    kind = "error" if strict else "warning"
    for line in lines:
        console.print(f"halyard {command}: {kind}: {line}", style="red" if strict else "yellow", markup=False,
                      highlight=False, soft_wrap=True)
    if lines and strict:
        console.print(f"halyard {command}: error: --strict refuses a policy that cannot act as named on this run",
                      style="red", markup=False, highlight=False, soft_wrap=True)
        return EXIT_RUN_REJECTED
    return 0


def report_rejected(rejected: Sequence[Rejected], *, jobs: int, strict: bool, console: Console,
                    command: str, run: str = "") -> int:
    """Print the first :data:`SHOWN_REJECTED` rejections (``job_id: reason``) and how many more there
    were; return the exit status the run earns: :data:`EXIT_RUN_REJECTED` when every one of ``jobs``
    was rejected (nothing ran) or, under ``strict``, when any was; else 0. ``run`` names the run
    (compare has several)."""

    def say(text: str, style: str) -> None:  # one line each, whatever the width; reasons are not markup
        console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)

    where = f"{run}: " if run else ""
    for r in rejected[:SHOWN_REJECTED]:
        say(f"{where}rejected {r.job_id}: {r.reason}", "yellow")
    if len(rejected) > SHOWN_REJECTED:
        say(f"{where}... and {len(rejected) - SHOWN_REJECTED:,} more rejected", "yellow")
    if not rejected:
        return 0
    if len(rejected) >= jobs:
        say(f"halyard {command}: error: {where}every one of the {plural(jobs, 'job')} was rejected at submission; "
            "nothing ran (the reasons above: does the cluster's GPU type, or the trace's model, exist in the "
            "catalog? `halyard profiles list`)", "red")
        return EXIT_RUN_REJECTED
    if strict:
        say(f"halyard {command}: error: {where}{len(rejected):,} of {plural(jobs, 'job')} rejected at submission, "
            "and --strict makes any rejection an error", "red")
        return EXIT_RUN_REJECTED
    return 0
