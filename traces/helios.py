"""SenseTime Helios ``cluster_log.csv`` (S-Lab-System-Group/HeliosData, SC '21).

``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,
end_time,duration,queue``, one Slurm job per row (``shared/traces/README.md`` §3,
from the HeliosData README). **No Helios job rows were obtained**: this loader
follows the documented schema and is tested on hand-written rows in that form.

Rules (``docs/trace-format.md``):

* Times are ``YYYY-MM-DD HH:MM:SS`` without a zone (probably China Standard
  Time, UTC+8, which has no daylight saving; undocumented), read as a naive
  wall clock. ``submit_time`` = ``submit_time`` minus the earliest one read.
* ``job_id`` = ``job_id`` (the Slurm id, unique within a cluster's file),
  ``user`` = ``user``, ``tenant`` = ``vc``, ``num_gpus`` = ``gpu_num``.
* ``duration_s`` = ``duration`` (seconds, ``end_time - start_time`` as
  precomputed by the trace), ``iterations`` = 0.
* Dropped, not errors: CPU-only jobs (``gpu_num`` = 0, more than half of all
  rows; the Helios artifact filters them the same way), jobs that never ran
  (``duration`` empty or 0).
* All states are kept (``COMPLETED``, ``CANCELLED``, ``FAILED``, ``TIMEOUT``,
  ``NODE_FAIL``, ...): a cancelled or failed job still held its GPUs.
* Bad rows: a cell that does not parse (including a non-empty ``start_time`` or
  ``end_time``), a negative count or duration.
* ``model``: the seeded rule keyed by ``job_id``.
* ``extra`` keeps every original field but ``job_id`` and ``user`` as written
  (``submit_time`` as ``source_submit_time``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from halyard.datamodel import ValidationError
from halyard.traces.assign import text_key
from halyard.traces.generator import SYNERGY_DEFAULT_SPLIT
from halyard.traces.loading import (
    CsvTable,
    TraceBuilder,
    check_file,
    extra_name,
    frozen,
    guard_unicode,
    naive_datetime,
    nonnegative_float,
    require,
)
from halyard.traces.schema import TraceLoad, parse_int_text

HELIOS_FORMAT = "helios"
HELIOS_COLUMNS: tuple[str, ...] = (
    "job_id", "user", "vc", "gpu_num", "cpu_num", "node_num", "state", "submit_time", "start_time", "end_time",
    "duration", "queue")
_EXTRA_COLUMNS = tuple(c for c in HELIOS_COLUMNS if c not in ("job_id", "user"))

DROP_CPU_ONLY = "CPU-only job (gpu_num = 0)"
DROP_NEVER_RAN = "never ran (duration empty or 0)"


def _nonnegative_int(text: str, field: str) -> int:
    value = parse_int_text(text, field)
    if value < 0:
        raise ValidationError(f"must be >= 0, got {text!r}", field=field)
    return value


def read_helios(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 0,
                split: Sequence[float] = SYNERGY_DEFAULT_SPLIT) -> TraceLoad:
    """Read a Helios ``cluster_log.csv`` (module docstring for the rules)."""
    p, source = check_file(path)
    return guard_unicode(source, lambda: _read(p, source, strict, seed, split))


def _read(p: Path, source: str, strict: bool, seed: int, split: Sequence[float]) -> TraceLoad:
    b = TraceBuilder(HELIOS_FORMAT, source, strict=strict, seed=seed, split=split)
    for line, cells, others in CsvTable(p, source, HELIOS_COLUMNS, HELIOS_FORMAT).rows(b):
        try:
            (job_id, user, vc, gpu_num, cpu_num, node_num, state, submitted, started, ended,
             duration, queue) = cells
            require(job_id, "job_id")
            gpus = _nonnegative_int(gpu_num, "gpu_num")
            _nonnegative_int(cpu_num, "cpu_num")
            _nonnegative_int(node_num, "node_num")
            require(vc, "vc")
            require(state, "state")
            time = naive_datetime(submitted, "submit_time")
            for text, name in ((started, "start_time"), (ended, "end_time")):
                if text != "":
                    naive_datetime(text, name)
            if queue != "":
                nonnegative_float(queue, "queue")
            run = nonnegative_float(duration, "duration") if duration != "" else 0.0
            if gpus == 0:
                b.drop(DROP_CPU_ONLY)
                continue
            if run == 0:
                b.drop(DROP_NEVER_RAN)
                continue
            extra = {extra_name(n): v for n, v in zip(HELIOS_COLUMNS, cells, strict=True)
                     if n in _EXTRA_COLUMNS and v != ""}
            fields = {"num_gpus": gpus, "duration_s": run, "tenant": vc, "user": user,
                      "extra": frozen(extra | others)}
        except ValidationError as err:
            b.error(err, line)
            continue
        b.add(line=line, time=time, job_id=job_id, fields=fields, key=text_key(job_id))
    return b.finish()
