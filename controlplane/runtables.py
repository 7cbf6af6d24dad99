"""Per-job and cluster-timeline tables of a run, written beside its JSON summary.

Both come from what the scheduling core keeps whichever driver runs it (the
simulator, or the control plane under ``halyard replay``): the job records and
the event log. :class:`TimelineRecorder` watches the event log and samples the
ledger after every event; :func:`job_table` reads the records and replays the
log for placements. So ``simulate`` and ``replay`` make their tables the same
way, and a table agrees with :func:`halyard.controlplane.summarize` by
construction (the mean of ``jct_s`` over completed jobs is ``avg_jct_s``).

Tables are Arrow tables (pyarrow), written as Parquet (typed, compressed,
read by pandas, polars, DuckDB and Spark alike) or CSV. pyarrow is the
``[reports]`` extra: a run keeps its tables as plain columns (:class:`RunTables`,
picklable for compare's worker processes) and makes Arrow tables of them only
when they are read or written, so ``halyard simulate`` without ``--out-dir``
runs without pyarrow (:mod:`halyard.extras`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halyard.datamodel import EventKind, JobEvent, JobState, ValidationError
from halyard.extras import require
from halyard.scheduling.core import SchedulingCore
from halyard.scheduling.eventcounts import EVENT_COUNTS, counts_of

if TYPE_CHECKING:
    import pyarrow as pa

TABLE_FORMATS = ("parquet", "csv")
SUMMARY_FILE = "summary.json"
JOBS_STEM = "jobs"
TIMELINE_STEM = "timeline"

# Column name and Arrow type (a pyarrow factory's name), in order.
JOB_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "string"),
    ("tenant", "string"),
    ("user", "string"),
    ("model", "string"),
    ("gpus", "int64"),             # requested
    ("gpu_type", "string"),        # requested type constraint, null for any
    ("state", "string"),           # at the end of the run
    ("measured", "bool_"),         # inside the summary's --measure window (all jobs without one)
    ("submit_s", "float64"),
    ("first_start_s", "float64"),  # null if it never ran
    ("finish_s", "float64"),       # when it ended (completed, failed or cancelled), else null
    ("queue_s", "float64"),        # all time PENDING, waits after preemptions included
    ("jct_s", "float64"),          # finish - submit, completed jobs only
    ("run_s", "float64"),
    ("gpu_s", "float64"),          # GPU-seconds held
    *((c.field, "int64") for c in EVENT_COUNTS),  # preemptions, suspensions (scheduling/eventcounts.py)
    ("restarts", "int64"),         # resumes from a checkpoint, migrations and resizes
    ("placements", "int64"),       # starts, migrations and resizes
    ("exposed_comm_s", "float64"),
    ("comm_share", "float64"),     # exposed communication / run time
    ("nodes", "int64"),            # of the last placement
    ("racks", "int64"),
    ("placement", "string"),       # the last placement, node:gpu,gpu;node:gpu
)

TIMELINE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("time_s", "float64"),
    ("gpus_used", "int64"),
    ("gpu_util", "float64"),
    ("cpu_util", "float64"),
    ("memory_util", "float64"),
    ("queued", "int64"),
    ("running", "int64"),
)

TABLES_NEED = "writing per-job and timeline tables (--out-dir)"


def arrow() -> Any:
    """pyarrow, or :class:`~halyard.extras.MissingExtra` naming the ``[reports]`` extra."""
    return require("pyarrow", TABLES_NEED)


def schema(columns: tuple[tuple[str, str], ...]) -> pa.Schema:
    pa = arrow()
    return pa.schema([(name, getattr(pa, kind)()) for name, kind in columns])


_PLACED = (EventKind.STARTED, EventKind.MIGRATED, EventKind.RESIZED)


class TimelineRecorder:
    """Samples the cluster after every event of ``core``'s log; one row per instant.

    Several events at one instant (completions, then the pass's starts) leave one
    row, the state after the last of them, so the table is the step function of
    cluster occupancy. Utilisation is what is held over what the cluster has.
    Attach it before the first event (a fresh core) to see the whole run.
    """

    def __init__(self, core: SchedulingCore) -> None:
        self._core = core
        cluster = core.cluster
        self._gpus = cluster.total_gpus
        self._cpus = cluster.total_cpus
        self._memory = cluster.total_memory_mb
        self._rows: list[tuple[float, int, int, int, int, int]] = []
        core.log.observe(self._sample)

    def _sample(self, event: JobEvent) -> None:
        core = self._core
        free = core.free
        row = (event.time, self._gpus - int(free.gpus.sum()), self._cpus - int(free.cpus.sum()),
               self._memory - int(free.memory_mb.sum()), len(core.pending), len(core.running))
        if self._rows and self._rows[-1][0] == event.time:
            self._rows[-1] = row
        else:
            self._rows.append(row)

    def table(self, origin: float = 0.0) -> pa.Table:
        """The samples as an Arrow table, times measured from ``origin`` (replay's trace start)."""
        return arrow().table(self.columns(origin), schema=schema(TIMELINE_COLUMNS))

    def columns(self, origin: float = 0.0) -> dict[str, list]:
        """The samples by column (:data:`TIMELINE_COLUMNS`), times measured from ``origin``."""
        rows = self._rows

        def ratio(i: int, total: int) -> list[float]:
            return [r[i] / total if total else 0.0 for r in rows]

        return {
            "time_s": [r[0] - origin for r in rows],
            "gpus_used": [r[1] for r in rows],
            "gpu_util": ratio(1, self._gpus),
            "cpu_util": ratio(2, self._cpus),
            "memory_util": ratio(3, self._memory),
            "queued": [r[4] for r in rows],
            "running": [r[5] for r in rows],
        }


def job_table(core: SchedulingCore, *, origin: float = 0.0, now: float | None = None,
              measure: tuple[int, int] | None = None) -> pa.Table:
    """:func:`job_columns` as an Arrow table."""
    return arrow().table(job_columns(core, origin=origin, now=now, measure=measure), schema=schema(JOB_COLUMNS))


def job_columns(core: SchedulingCore, *, origin: float = 0.0, now: float | None = None,
                measure: tuple[int, int] | None = None) -> dict[str, list]:
    """One row per job the core accepted, in arrival order, by column (:data:`JOB_COLUMNS`).

    Times are measured from ``origin``; a job still running is measured at ``now``
    (default: the last event's time). ``measure`` marks the jobs of the summary's
    arrival window, as :func:`halyard.controlplane.summarize` takes it.
    """
    placements: dict[str, int] = {}
    last: dict[str, str] = {}
    last_time = origin
    for event in core.log:
        last_time = event.time
        if event.kind in _PLACED:
            placements[event.job_id] = placements.get(event.job_id, 0) + 1
            last[event.job_id] = event.detail
    at_end = last_time if now is None else now
    cluster = core.cluster
    columns: dict[str, list] = {name: [] for name, _ in JOB_COLUMNS}
    for r in sorted(core.records.values(), key=lambda r: r.arrival_seq):
        at = r.end_time if r.end_time is not None else at_end
        run = r.run_time_s(at)
        exposed = r.exposed_comm_s(at)
        text = last.get(r.job_id, "")
        nodes = [part.split(":", 1)[0] for part in text.split(";")] if text else []
        spec = r.spec
        values = {
            "job_id": r.job_id, "tenant": spec.tenant, "user": spec.user, "model": spec.model,
            "gpus": spec.num_gpus, "gpu_type": spec.gpu_type, "state": r.state.value,
            "measured": measure is None or measure[0] <= r.arrival_seq < measure[1],
            "submit_s": spec.submit_time - origin,
            "first_start_s": None if r.first_start is None else r.first_start - origin,
            "finish_s": None if r.end_time is None else r.end_time - origin,
            "queue_s": r.queued_s + (at - r.pending_since if r.state is JobState.PENDING else 0.0),
            "jct_s": (r.end_time - spec.submit_time
                      if r.state is JobState.COMPLETED and r.end_time is not None else None),
            "run_s": run, "gpu_s": r.attained_gpu_s(at),
            **counts_of(r), "restarts": r.restarts,
            "placements": placements.get(r.job_id, 0),
            "exposed_comm_s": exposed, "comm_share": exposed / run if run > 0 else 0.0,
            "nodes": len(nodes), "racks": len({cluster.node(n).rack for n in nodes}), "placement": text,
        }
        for name, value in values.items():
            columns[name].append(value)
    return columns


@dataclass(frozen=True)
class RunTables:
    """What a run writes: the JSON summary and its two tables, kept as plain columns (:func:`job_columns`,
    :meth:`TimelineRecorder.columns`) and made Arrow tables (pyarrow, the ``[reports]`` extra) when read."""

    summary: Mapping[str, object]
    job_columns: Mapping[str, list]
    timeline_columns: Mapping[str, list]

    @functools.cached_property
    def jobs(self) -> pa.Table:
        return arrow().table(dict(self.job_columns), schema=schema(JOB_COLUMNS))

    @functools.cached_property
    def timeline(self) -> pa.Table:
        return arrow().table(dict(self.timeline_columns), schema=schema(TIMELINE_COLUMNS))

    def with_summary(self, summary: Mapping[str, object]) -> RunTables:
        """The same tables beside another summary (an annotated one)."""
        return dataclasses.replace(self, summary=summary)


def check_table_format(fmt: str) -> str:
    if fmt not in TABLE_FORMATS:
        raise ValidationError(f"unknown table format {fmt!r} (known: {', '.join(TABLE_FORMATS)})",
                              field="--table-format")
    return fmt


def write_run(out_dir: Path, tables: RunTables, *, fmt: str = "parquet") -> dict[str, Path]:
    """Write ``summary.json``, ``jobs.<fmt>`` and ``timeline.<fmt>`` into ``out_dir``; returns the paths."""
    check_table_format(fmt)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"summary": out_dir / SUMMARY_FILE, "jobs": out_dir / f"{JOBS_STEM}.{fmt}",
             "timeline": out_dir / f"{TIMELINE_STEM}.{fmt}"}
    paths["summary"].write_text(json.dumps(dict(tables.summary), indent=2) + "\n", encoding="utf-8")
    jobs, timeline = tables.jobs, tables.timeline  # pyarrow's absence fails here, before a file is written
    for key, table in (("jobs", jobs), ("timeline", timeline)):
        if fmt == "parquet":
            require("pyarrow.parquet", TABLES_NEED).write_table(table, paths[key])
        else:
            require("pyarrow.csv", TABLES_NEED).write_csv(table, paths[key])
    return paths


def read_table(path: Path) -> pa.Table:
    """A table :func:`write_run` wrote (Parquet or CSV, by suffix)."""
    if path.suffix == ".parquet":
        return require("pyarrow.parquet", TABLES_NEED).read_table(path)
    pacsv = require("pyarrow.csv", TABLES_NEED)
    columns = schema(JOB_COLUMNS if path.stem == JOBS_STEM else TIMELINE_COLUMNS)
    return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=columns))
