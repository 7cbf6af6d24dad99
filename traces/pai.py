"""Alibaba PAI GPU trace v2020 (alibaba/clusterdata ``cluster-trace-gpu-v2020``, NSDI '22).

Two headerless CSV tables side by side (``shared/traces/README.md`` §2a; the
column names are in the upstream ``.header`` files)::

    pai_job_table.csv   job_name,inst_id,user,status,start_time,end_time
    pai_task_table.csv  job_name,task_name,inst_num,status,start_time,end_time,
                        plan_cpu,plan_mem,plan_gpu,gpu_type

Either file may be given; the other is found next to it by swapping
``job_table`` and ``task_table`` in the file name. **No PAI job or task rows
were obtained**: this loader follows the documented schema and is tested on
hand-written rows in that form.

Rules (``docs/trace-format.md``):

* A job is a ``job_name`` of the job table with its task rows (one or more
  roles, each ``inst_num`` instances). ``job_id`` = ``job_name``; ``user`` =
  ``user``; ``tenant`` stays ``default``.
* **Time.** Times are seconds of a Unix clock shifted by a secret constant;
  read in Asia/Shanghai (UTC+8, no daylight saving) they give the true time of
  day and day of week but fake dates. A time of 0 or an empty cell is missing.
  ``submit_time`` = the job's ``start_time`` (its submission) minus the
  earliest one read; ``extra["submit_local"]`` is that time as Asia/Shanghai
  wall-clock text (``YYYY-MM-DD HH:MM:SS+08:00``, fake date, true time of day).
* ``duration_s`` = latest task ``end_time`` - earliest task ``start_time`` (the
  run, without the scheduling wait), ``iterations`` = 0.
* **Fractional GPUs.** ``plan_gpu`` is a percentage of one GPU per instance
  (50 = half a GPU, 800 = 8 GPUs). The job's GPU demand is
  ``sum(inst_num * plan_gpu) / 100`` over its tasks (an empty ``plan_gpu`` is
  0, e.g. a parameter-server task), and ``num_gpus`` = that rounded **up** to a
  whole GPU: the scheduler allocates whole GPUs. ``extra["gpu_fraction"]``
  keeps the exact demand (``repr``).
* Dropped, not errors: jobs with no GPU demand (CPU jobs), jobs not finished
  (``Running``/``Waiting``, or a job or task time missing), jobs without task
  rows, task rows whose job is not in the job table (counted per job), runs
  of 0 s.
* Bad rows: a row with the wrong number of cells, an unknown ``status``, a
  number that does not parse, a negative count, a repeated ``job_name`` in the
  job table. A bad task row also removes its job (its demand is unknown).
* ``gpu_type`` (``MISC``, ``P100``, ``T4``, ``V100``, ``V100M32``, ...) is kept in
  ``extra["source_gpu_type"]`` (several types joined by ``|``), not made a
  constraint: ``MISC`` names no GPU type and the job ran where PAI put it.
* ``model``: the seeded rule keyed by ``job_name``.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from halyard.datamodel import ValidationError
from halyard.traces.assign import text_key
from halyard.traces.generator import SYNERGY_DEFAULT_SPLIT
from halyard.traces.loading import TraceBuilder, check_file, frozen, guard_unicode, nonnegative_float, whole_number
from halyard.traces.schema import TraceLoad, csv_records

PAI_FORMAT = "pai-v2020"
PAI_JOB_COLUMNS: tuple[str, ...] = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
PAI_TASK_COLUMNS: tuple[str, ...] = (
    "job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem", "plan_gpu",
    "gpu_type")
PAI_STATUSES = frozenset({"Running", "Terminated", "Failed", "Waiting"})
FINISHED_STATUSES = frozenset({"Terminated", "Failed"})
PERCENT_PER_GPU = 100.0
SHANGHAI = dt.timezone(dt.timedelta(hours=8), "Asia/Shanghai")  # UTC+8 all year since 1991
_JOB_TABLE, _TASK_TABLE = "job_table", "task_table"
_ROUNDING = 1e-9  # 100.0000000001 % of a GPU is still one GPU

DROP_CPU_ONLY = "no GPU demand (plan_gpu 0 or empty)"
DROP_UNFINISHED = "not finished (Running/Waiting or a time missing)"
DROP_NO_TASKS = "no task rows"
DROP_ORPHAN_TASKS = "task rows without a job row (per job)"
DROP_ZERO_RUN = "zero run time"


def looks_like_pai(path: Path, header: Sequence[str]) -> bool:
    if path.name.startswith(("pai_job_table", "pai_task_table")) and path.suffix != ".header":
        return True
    width = len(header)
    return width in (len(PAI_JOB_COLUMNS), len(PAI_TASK_COLUMNS)) and header[3] in PAI_STATUSES


def pai_tables(path: Path) -> tuple[Path, Path]:
    """``(job table, task table)`` for either of the two files."""
    name = path.name
    if _JOB_TABLE in name:
        return path, path.with_name(name.replace(_JOB_TABLE, _TASK_TABLE, 1))
    if _TASK_TABLE in name:
        return path.with_name(name.replace(_TASK_TABLE, _JOB_TABLE, 1)), path
    raise ValidationError(f"a PAI v2020 trace is two files, ...{_JOB_TABLE}...csv and ...{_TASK_TABLE}...csv "
                          f"side by side; this file name contains neither", source=str(path))


def shanghai_time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, SHANGHAI).isoformat(sep=" ")


def _time(text: str, field: str) -> float | None:
    """A PAI time: None when empty or 0 (missing)."""
    if text == "":
        return None
    value = nonnegative_float(text, field)
    return value if value > 0 else None


def _status(text: str) -> str:
    if text not in PAI_STATUSES:
        raise ValidationError(f"must be one of {', '.join(sorted(PAI_STATUSES))}, got {text!r}", field="status")
    return text


@dataclass(slots=True)
class _Job:
    line: int
    cells: list[str]
    submitted: float | None
    finished: bool


@dataclass(slots=True)
class _Tasks:
    gpu_percent: float = 0.0
    start: float = math.inf
    end: float = -math.inf
    count: int = 0
    complete: bool = True
    bad: bool = False
    gpu_types: dict[str, None] = field(default_factory=dict)


def read_pai(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 0,
             split: Sequence[float] = SYNERGY_DEFAULT_SPLIT) -> TraceLoad:
    """Read a PAI v2020 job table with its task table (module docstring for the rules)."""
    p, source = check_file(path)
    job_path, task_path = pai_tables(p)
    for q in (job_path, task_path):
        if not q.is_file():
            raise ValidationError(f"the PAI v2020 {'job' if q == job_path else 'task'} table is missing "
                                  f"(expected next to {p.name})", source=str(q))
    return guard_unicode(source, lambda: _read(job_path, task_path, source, strict, seed, split))


def _rows(path: Path, width: int, b: TraceBuilder):
    with path.open(newline="", encoding="utf-8-sig") as f:
        for line, row in csv_records(csv.reader(f)):
            if len(row) != width:
                b.error(ValidationError(f"expected {width} cells, got {len(row)}"), line, str(path))
                continue
            yield line, row


def _read(job_path: Path, task_path: Path, source: str, strict: bool, seed: int,
          split: Sequence[float]) -> TraceLoad:
    b = TraceBuilder(PAI_FORMAT, source, strict=strict, seed=seed, split=split)
    job_source, task_source = str(job_path), str(task_path)
    jobs: dict[str, _Job] = {}
    for line, row in _rows(job_path, len(PAI_JOB_COLUMNS), b):
        try:
            name, _inst, _user, status, start, end = row
            if not name:
                raise ValidationError("is required but empty", field="job_name")
            if name in jobs:
                raise ValidationError(f"duplicate job_name {name!r}: also on line {jobs[name].line} "
                                      f"(this row is skipped)", field="job_name")
            finished = _status(status) in FINISHED_STATUSES
            submitted = _time(start, "start_time")
            ended = _time(end, "end_time")
        except ValidationError as err:
            b.error(err, line, job_source)
            continue
        jobs[name] = _Job(line, row, submitted, finished and submitted is not None and ended is not None)

    tasks: dict[str, _Tasks] = {}
    for line, row in _rows(task_path, len(PAI_TASK_COLUMNS), b):
        name = row[0]
        agg = tasks.get(name)
        if agg is None:
            agg = tasks[name] = _Tasks()
        try:
            if not name:
                raise ValidationError("is required but empty", field="job_name")
            _, _task, inst_num, status, start, end, plan_cpu, plan_mem, plan_gpu, gpu_type = row
            instances = whole_number(inst_num, "inst_num")
            if instances < 0:
                raise ValidationError(f"must be >= 0, got {inst_num!r}", field="inst_num")
            _status(status)
            started = _time(start, "start_time")
            ended = _time(end, "end_time")
            for text, column in ((plan_cpu, "plan_cpu"), (plan_mem, "plan_mem")):
                if text != "":
                    nonnegative_float(text, column)
            gpu = nonnegative_float(plan_gpu, "plan_gpu") if plan_gpu != "" else 0.0
        except ValidationError as err:
            agg.bad = True
            b.error(err, line, task_source)
            continue
        agg.count += 1
        agg.gpu_percent += instances * gpu
        if started is None or ended is None:
            agg.complete = False
        else:
            agg.start = min(agg.start, started)
            agg.end = max(agg.end, ended)
        if gpu_type:
            agg.gpu_types[gpu_type] = None

    for name in tasks.keys() - jobs.keys():
        if name and not tasks[name].bad:
            b.drop(DROP_ORPHAN_TASKS)
    for name, job in jobs.items():
        agg = tasks.get(name)
        if agg is not None and agg.bad:
            continue  # reported with the task row
        if agg is None or agg.count == 0:
            b.drop(DROP_NO_TASKS)
            continue
        if agg.gpu_percent <= 0:
            b.drop(DROP_CPU_ONLY)
            continue
        if not job.finished or not agg.complete or job.submitted is None:
            b.drop(DROP_UNFINISHED)
            continue
        run = agg.end - agg.start
        if run <= 0:
            b.drop(DROP_ZERO_RUN)
            continue
        _, inst_id, user, status, start, end = job.cells
        demand = agg.gpu_percent / PERCENT_PER_GPU
        extra = {"inst_id": inst_id, "status": status, "start_time": start, "end_time": end,
                 "submit_local": shanghai_time(job.submitted), "tasks": str(agg.count),
                 "task_start_time": repr(agg.start), "task_end_time": repr(agg.end),
                 "plan_gpu_total": repr(agg.gpu_percent), "gpu_fraction": repr(demand),
                 "source_gpu_type": "|".join(agg.gpu_types)}
        fields = {"num_gpus": max(1, math.ceil(demand - _ROUNDING)), "duration_s": run, "user": user,
                  "extra": frozen({k: v for k, v in extra.items() if v != ""})}
        b.add(line=job.line, time=job.submitted, job_id=name, fields=fields, key=text_key(name),
              source=job_source)
    return b.finish()

