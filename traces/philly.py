"""Reader for the processed Philly job file of the Pollux artifact.

Format (``shared/traces/README.md`` §1c; petuum/adaptdl ``osdi21-artifact``
``simulator/traces/philly.csv``), one row per job, unsorted::

    timestamp,duration,num_gpus,gpu_time,cluster
    2017-10-09 07:01:55,66.0,1,66.0,11cb48

Rules (also in ``docs/trace-format.md``):

* ``timestamp`` is ``YYYY-MM-DD HH:MM:SS`` with no time zone: Philly's local
  time (most likely US-Pacific; not documented). It is read as a naive wall
  clock, with no DST adjustment, so differences are plain calendar arithmetic.
  ``submit_time`` = seconds since the earliest timestamp of the rows read.
* Jobs are sorted by ``(timestamp, row number)``.
* ``job_id`` = ``philly-<n>``, ``n`` the 1-based data row number (file line n + 1
  when there are no blank lines). Blank lines are skipped silently and not
  counted; bad rows are counted, so ids never shift.
* ``duration_s`` = ``duration`` (> 0), ``iterations`` = 0 (the performance model
  converts the duration later), ``num_gpus`` an integer >= 1, ``tenant`` =
  ``cluster`` (the virtual cluster). ``extra`` keeps ``timestamp``, ``cluster``
  and ``gpu_time`` as written.
* ``model``: Philly records none. Each row gets one by a seeded rule that depends
  only on ``(seed, n)``: a task by the split (default Synergy's (20, 70, 10)),
  then a model of that task uniformly (Synergy Table 4), each decided by a
  64-bit hash of ``(seed, n, draw)``; see :func:`halyard.traces.assign.assign_models`
  (the data row number ``n`` is the key). The same row
  number gets the same model whatever the row order and however the file is
  sliced (the 2,000-row sample agrees with the full file).
"""

from __future__ import annotations

import csv
import datetime as dt
import os
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

from halyard.datamodel import JobSpec, ValidationError
from halyard.traces.assign import assign_models
from halyard.traces.assign import check_seed as _check_seed
from halyard.traces.generator import SYNERGY_DEFAULT_SPLIT, task_probabilities
from halyard.traces.schema import TraceLoad, csv_records, parse_float_text, parse_int_text, require_trace_file

# The header of the Pollux artifact's processed Philly file (traces README §1c).
PHILLY_COLUMNS: tuple[str, ...] = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
PHILLY_FORMAT = "philly-pollux"
PHILLY_JOB_ID_PREFIX = "philly-"
PHILLY_TIMESTAMP_LEN = len("YYYY-MM-DD HH:MM:SS")
_EPOCH = dt.datetime(1970, 1, 1)  # any fixed naive origin; only differences matter

def _parse_timestamp(text: str) -> dt.datetime:
    stamp = None
    if len(text) == PHILLY_TIMESTAMP_LEN and text[10] == " ":
        try:
            stamp = dt.datetime.fromisoformat(text)
        except ValueError:
            stamp = None
        if stamp is not None and stamp.tzinfo is not None:
            stamp = None  # e.g. "2017-10-09 07:01+01" has the right length but a zone
    if stamp is None:
        raise ValidationError(f"must be 'YYYY-MM-DD HH:MM:SS', got {text!r}", field="timestamp")
    return stamp


def read_philly(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 0,
                split: Sequence[float] = SYNERGY_DEFAULT_SPLIT) -> TraceLoad:
    """Read the processed Philly file (module docstring for the rules).

    Bad rows (unparseable timestamp, duration not a positive number,
    ``num_gpus`` not an integer >= 1, empty cluster, wrong number of cells)
    are skipped and listed in ``errors`` naming file, line and column; with
    ``strict=True`` the first one raises.
    """
    source = str(path)
    p = require_trace_file(path)
    _check_seed(seed)  # validate the arguments before reading
    task_probabilities(split)

    try:
        parsed, errors = _read_rows(p, source, strict)
    except UnicodeDecodeError as err:
        raise ValidationError(f"not UTF-8 text ({err.reason} at byte {err.start})", source=source) from None
    # Sort by (timestamp, data row number): the first two fields, unique per row.
    parsed.sort()
    models = assign_models([r[1] for r in parsed], seed=seed, split=split)
    start = parsed[0][0] if parsed else 0.0
    jobs = tuple([
        JobSpec(
            job_id=f"{PHILLY_JOB_ID_PREFIX}{number}",
            submit_time=seconds - start,
            model=model,
            num_gpus=gpus,
            iterations=0,
            duration_s=duration,
            tenant=cluster,
            extra=MappingProxyType({"timestamp": timestamp, "cluster": cluster, "gpu_time": gpu_time}),
        )
        for (seconds, number, duration, gpus, timestamp, gpu_time, cluster), model
        in zip(parsed, models, strict=True)
    ])
    return TraceLoad(jobs=jobs, errors=tuple(errors), format=PHILLY_FORMAT, source=source)


# A parsed row: (seconds since _EPOCH, data row number, duration, num_gpus,
# timestamp, gpu_time, cluster) -- flat, so sorting compares the first two.
_Row = tuple[float, int, float, int, str, str, str]


def _read_rows(p: Path, source: str, strict: bool) -> tuple[list[_Row], list[ValidationError]]:
    errors: list[ValidationError] = []
    parsed: list[_Row] = []
    with p.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(header) != PHILLY_COLUMNS:
            raise ValidationError(f"expected header {','.join(PHILLY_COLUMNS)!r}, got "
                                  f"{','.join(header or [])!r}", source=source, line=1)
        # Blank lines (the full file ends with one) are skipped and not numbered.
        for row_number, (line, row) in enumerate(csv_records(reader), start=1):
            try:
                if len(row) != len(PHILLY_COLUMNS):
                    raise ValidationError(f"expected {len(PHILLY_COLUMNS)} cells, got {len(row)}")
                timestamp, duration_text, gpus_text, gpu_time, cluster = row
                seconds = (_parse_timestamp(timestamp) - _EPOCH).total_seconds()
                duration = parse_float_text(duration_text, "duration")
                if duration <= 0:
                    raise ValidationError(f"must be > 0 seconds, got {duration_text!r}", field="duration")
                gpus = parse_int_text(gpus_text, "num_gpus")
                if gpus < 1:
                    raise ValidationError(f"must be >= 1, got {gpus_text!r}", field="num_gpus")
                if not cluster:
                    raise ValidationError("is empty; it names the virtual cluster (tenant)", field="cluster")
            except ValidationError as err:
                located = err.at(source=source, line=line)
                if strict:
                    raise located from None
                errors.append(located)
                continue
            parsed.append((seconds, row_number, duration, gpus, timestamp, gpu_time, cluster))
    return parsed, errors
