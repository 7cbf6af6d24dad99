"""Simulation runs as data: one function that runs a trace through a policy, and a sweep of them.

``halyard simulate`` runs one :class:`RunSpec` in-process; ``halyard compare`` and the
reproduction scripts run many in parallel worker processes (a
:class:`concurrent.futures.ProcessPoolExecutor`) or on a Ray cluster, with one
progress bar over the jobs of every run. A run is what ``halyard simulate`` with
the same options does, so :meth:`RunSpec.argv` is the exact command that
reproduces it and its files.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import queue as queue_module
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from halyard.controlplane.runtables import RunTables, TimelineRecorder, job_columns, write_run
from halyard.datamodel import Cluster, HalyardError, JobSpec, ValidationError, load_cluster
from halyard.emulator.catalog import Catalog, load_model_catalog
from halyard.emulator.performance import CONTENTION_MODES
from halyard.policies import make_policy
from halyard.scheduling import Simulator, summarize
from halyard.scheduling.simulator import Rejected
from halyard.scheduling.timing import performance_model_for
from halyard.traces import TraceLoad, read_trace

DEFAULT_ROUND_S = 300.0  # DESIGN.md: lease of 5 minutes of cluster time
PROGRESS_EVERY_S = 0.2  # how often a worker reports its progress; more often only costs time
POLL_S = 0.1  # how often the parent looks for progress and finished runs

ProgressCallback = Callable[[int, int, float], None]  # (finished jobs, known jobs, cluster time)


@dataclass(frozen=True)
class RunSpec:
    """One simulation: what ``halyard simulate`` would be given. ``name`` names its output folder."""

    name: str
    trace: str
    policy: str
    cluster: str = "default"
    seed: int = 0
    round_s: float = DEFAULT_ROUND_S
    contention: str = "fair"
    trace_format: str = "auto"
    measure: tuple[int, int] | None = None
    until_measured: bool = False  # end the run once the measured jobs have ended (--until-measured)
    catalog: str | None = None  # a model profile over the built-in catalog (--catalog FILE)
    # Labels a caller sorts results by (a reproduction's arrival pattern, load, ...);
    # not options of the run.
    tags: tuple[tuple[str, Any], ...] = ()

    def argv(self, out_dir: Path | str | None = None, table_format: str = "parquet") -> list[str]:
        """The ``halyard simulate`` command line of this run (writing its files to ``out_dir``)."""
        argv = ["halyard", "simulate", "--trace", self.trace, "--trace-format", self.trace_format,
                "--cluster", self.cluster, "--policy", self.policy, "--seed", str(self.seed),
                "--round-s", str(self.round_s), "--contention", self.contention]
        if self.measure is not None:
            argv += ["--measure", f"{self.measure[0]}:{self.measure[1]}"]
        if self.until_measured:
            argv += ["--until-measured"]
        if self.catalog is not None:
            argv += ["--catalog", self.catalog]
        if out_dir is not None:
            argv += ["--out-dir", str(out_dir)]
            if table_format != "parquet":
                argv += ["--table-format", table_format]
        return argv

    def command(self, out_dir: Path | str | None = None, table_format: str = "parquet") -> str:
        return shlex.join(self.argv(out_dir, table_format))


@dataclass(frozen=True)
class RunResult:
    spec: RunSpec
    tables: RunTables  # summary, per-job table, timeline
    rejected: tuple[Rejected, ...] = ()

    @property
    def summary(self) -> dict[str, Any]:
        return dict(self.tables.summary)


def simulate_jobs(jobs: Sequence[JobSpec], cluster: Cluster, policy_name: str, *,
                  round_s: float = DEFAULT_ROUND_S, contention: str = "fair",
                  measure: tuple[int, int] | None = None, until_measured: bool = False,
                  on_progress: ProgressCallback | None = None,
                  catalog: Catalog | None = None, freeze_gc: bool = False) -> tuple[RunTables, list[Rejected]]:
    """Replay ``jobs`` through ``policy_name`` on the simulator: summary, per-job table and timeline
    (``catalog``: the performance model's, default the built-in one). ``until_measured`` ends the
    run once the ``measure`` window's jobs have ended (:meth:`Simulator.run`'s ``until``); ``freeze_gc``
    as :meth:`Simulator.run` has it (for a process that runs this one simulation)."""
    if until_measured and measure is None:
        raise ValidationError("needs a --measure window", field="--until-measured")
    if round_s <= 0:
        raise ValidationError("must be positive", field="--round-s")
    if contention not in CONTENTION_MODES:
        raise ValidationError(f"must be one of {', '.join(CONTENTION_MODES)}, got {contention!r}",
                              field="--contention")
    policy = make_policy(policy_name)
    simulator = Simulator(cluster, policy, performance_model_for(policy, contention=contention, catalog=catalog),
                          round_s=round_s)
    timeline = TimelineRecorder(simulator.core)
    started = time.perf_counter()
    outcome = simulator.run(jobs, on_progress=on_progress, total_jobs=len(jobs),
                            until=measure if until_measured else None, freeze_gc=freeze_gc)
    wall_s = time.perf_counter() - started
    summary = summarize(simulator.core, policy=policy.name, trace_jobs=len(jobs), rejected=len(outcome.rejected),
                        wall_s=wall_s, measure=measure)
    tables = RunTables(summary, job_columns(simulator.core, now=outcome.end_time, measure=measure),
                       timeline.columns())
    return tables, outcome.rejected


def execute(spec: RunSpec, on_progress: ProgressCallback | None = None) -> RunResult:
    """Run ``spec`` here (a worker process, a Ray task or ``halyard simulate``)."""
    loaded = read_trace(spec.trace, seed=spec.seed, format=spec.trace_format)
    tables, rejected = simulate_jobs(loaded.jobs, load_cluster(spec.cluster), spec.policy, round_s=spec.round_s,
                                     contention=spec.contention, measure=spec.measure,
                                     until_measured=spec.until_measured, on_progress=on_progress,
                                     catalog=load_model_catalog(spec.catalog) if spec.catalog else None)
    summary = annotate(tables.summary, trace=spec.trace, loaded=loaded, seed=spec.seed,
                       contention=spec.contention, round_s=spec.round_s)
    return RunResult(spec, tables.with_summary(summary), tuple(rejected))


def annotate(summary: Mapping[str, Any], *, trace: str, loaded: TraceLoad, seed: int, contention: str,
             round_s: float) -> dict[str, Any]:
    """The summary plus what the run read and how it was set (simulate and compare write the same keys)."""
    return dict(summary) | {"trace": trace, "trace_format": loaded.format, "skipped_rows": len(loaded.errors),
                            "dropped_rows": loaded.dropped_total, "seed": seed, "contention": contention,
                            "round_s": round_s}


# ------------------------------------------------------------------ many runs


@dataclass
class _Tracker:
    """Finished jobs per run, summed into one bar."""

    totals: list[int]
    done: list[int] = field(default_factory=list)
    runs_done: int = 0

    def __post_init__(self) -> None:
        self.done = [0] * len(self.totals)


@contextmanager
def _progress(tracker: _Tracker, *, enabled: bool, label: str) -> Iterator[Callable[[], None]]:
    """Yields ``redraw()``; one bar over the jobs of every run, on a terminal only."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda: None
        return
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("jobs, {task.fields[runs]} runs"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=sum(tracker.totals), runs=f"0/{len(tracker.totals)}")

        def redraw() -> None:
            bar.update(task, completed=sum(tracker.done), runs=f"{tracker.runs_done}/{len(tracker.totals)}")

        yield redraw


class _Reporter:
    """A worker's progress callback: at most every PROGRESS_EVERY_S, put (run, finished, known) on a queue."""

    def __init__(self, index: int, sink: Any) -> None:
        self.index = index
        self.sink = sink
        self.last = 0.0

    def __call__(self, finished: int, known: int, now: float) -> None:
        wall = time.monotonic()
        if wall - self.last >= PROGRESS_EVERY_S:
            self.last = wall
            self.sink.put((self.index, finished, known))


def _pool_execute(index: int, spec: RunSpec, sink: Any) -> RunResult:
    return execute(spec, _Reporter(index, sink))


def run_many(specs: Sequence[RunSpec], *, totals: Sequence[int], workers: int | None = None,
             ray_address: str | None = None, progress: bool = True, label: str = "runs",
             on_result: Callable[[RunResult], None] | None = None) -> list[RunResult]:
    """Run every spec in parallel; results in the order of ``specs``.

    ``totals`` is each run's job count (the progress bar's length). Runs go to a
    local process pool of ``workers`` processes (default: one per CPU, at most one
    per run), or with ``ray_address`` to that Ray cluster (``ray.init(address=...)``:
    ``auto``, ``ray://HOST:PORT``, or ``local`` for a fresh local instance), whose
    workers must have Halyard installed and read the trace and cluster at the same
    paths. ``on_result`` sees each run as it finishes (in finishing order). A failed
    run raises :class:`HalyardError` naming it.
    """
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValidationError("run names must be unique", field="name")
    tracker = _Tracker(list(totals))
    results: list[RunResult | None] = [None] * len(specs)
    console = Console(stderr=True)
    quiet = not progress or not console.is_terminal

    def finished(index: int, result: RunResult) -> None:
        results[index] = result
        tracker.done[index] = tracker.totals[index]
        tracker.runs_done += 1
        if on_result is not None:
            on_result(result)
        if progress and quiet:  # off a terminal: a line per run instead of the bar
            s = result.summary
            console.print(f"{label}: {tracker.runs_done}/{len(specs)} {result.spec.name}: "
                          f"avg JCT {s['avg_jct_s'] / 3600:.2f} h, wall {s['wall_s']:.1f} s", highlight=False)

    with _progress(tracker, enabled=progress, label=label) as redraw:
        if ray_address is not None:
            _run_on_ray(specs, ray_address, tracker, finished, redraw)
        else:
            _run_in_pool(specs, workers, tracker, finished, redraw)
    return [r for r in results if r is not None]


def _drain(sink: Any, tracker: _Tracker) -> None:
    while True:
        try:
            index, done, known = sink.get_nowait()
        except (queue_module.Empty, EOFError, OSError):
            return
        tracker.totals[index] = max(tracker.totals[index], known)
        tracker.done[index] = max(tracker.done[index], done)


def _failure(spec: RunSpec, exc: BaseException) -> HalyardError:
    """The error of a failed run, naming the run and the command that repeats it alone."""
    return HalyardError(f"run {spec.name} failed: {type(exc).__name__}: {exc} (alone: {spec.command()})")


def _run_in_pool(specs: Sequence[RunSpec], workers: int | None, tracker: _Tracker,
                 finished: Callable[[int, RunResult], None], redraw: Callable[[], None]) -> None:
    count = max(1, min(workers or multiprocessing.cpu_count(), len(specs)))
    # spawn: workers start clean (no copy of the parent's threads or locks); the manager's
    # queue is the one kind of queue that can be handed to a pool task as an argument.
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
        sink = manager.Queue()
        futures: dict[Future[RunResult], int] = {pool.submit(_pool_execute, i, s, sink): i
                                                 for i, s in enumerate(specs)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
                _drain(sink, tracker)
                for future in sorted(done, key=futures.__getitem__):  # in spec order
                    index = futures[future]
                    try:
                        result = future.result()
                    except Exception as exc:  # a bad trace row, a policy's PlanError, a lost worker
                        raise _failure(specs[index], exc) from exc
                    finished(index, result)
                redraw()
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _run_on_ray(specs: Sequence[RunSpec], address: str, tracker: _Tracker,
                finished: Callable[[int, RunResult], None], redraw: Callable[[], None]) -> None:
    try:
        import ray
        from ray.util.queue import Empty as RayEmpty
        from ray.util.queue import Queue as RayQueue
    except ImportError:
        raise HalyardError("--ray needs Ray: pip install 'halyard[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, log_to_driver=False, include_dashboard=False, configure_logging=False)
    try:
        sink = RayQueue()
        task = ray.remote(_ray_execute)
        refs = {task.remote(i, _absolute(s), sink): i for i, s in enumerate(specs)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            while True:
                try:
                    index, count, known = sink.get_nowait()
                except RayEmpty:
                    break
                tracker.totals[index] = max(tracker.totals[index], known)
                tracker.done[index] = max(tracker.done[index], count)
            for ref in done:
                index = refs[ref]
                try:
                    result = ray.get(ref)
                except Exception as exc:
                    raise _failure(specs[index], exc) from exc
                finished(index, dataclasses.replace(result, spec=specs[index]))
            redraw()
    finally:
        if started_here:
            ray.shutdown()


def _absolute(spec: RunSpec) -> RunSpec:
    """``spec`` with its trace (and cluster, if a file) as absolute paths: the workers of a Ray
    cluster read them at the paths given, not relative to wherever each worker runs."""
    cluster = Path(spec.cluster)
    return dataclasses.replace(spec, trace=str(Path(spec.trace).resolve()),
                               cluster=str(cluster.resolve()) if cluster.is_file() else spec.cluster)


def _ray_execute(index: int, spec: RunSpec, sink: Any) -> RunResult:
    return execute(spec, _Reporter(index, sink))


def run_and_save(specs: Sequence[RunSpec], runs_dir: Path, *, totals: Sequence[int] | None = None,
                 table_format: str = "parquet", workers: int | None = None, ray_address: str | None = None,
                 progress: bool = True, label: str = "runs") -> list[RunResult]:
    """:func:`run_many`, writing each run's summary and tables to ``runs_dir/<name>`` as it finishes
    (what ``halyard simulate --out-dir`` writes, so a long sweep keeps what it has done).
    Without ``totals`` each distinct trace is read once here to size the progress bar."""
    if totals is None:
        counts: dict[tuple[str, str, int], int] = {}
        for s in specs:
            key = (s.trace, s.trace_format, s.seed)
            if key not in counts:
                counts[key] = trace_jobs(s.trace, trace_format=s.trace_format, seed=s.seed)
        totals = [counts[(s.trace, s.trace_format, s.seed)] for s in specs]

    def save(result: RunResult) -> None:
        write_run(runs_dir / result.spec.name, result.tables, fmt=table_format)

    return run_many(specs, totals=totals, workers=workers, ray_address=ray_address, progress=progress,
                    label=label, on_result=save)


def trace_jobs(path: str, *, trace_format: str = "auto", seed: int = 0) -> int:
    """How many jobs a trace holds (for the progress bar's length); raises on a bad trace."""
    return len(read_trace(path, seed=seed, format=trace_format).jobs)
