"""The canonical trace schema: one row per job, the columns of :class:`JobSpec`.

Every loader in :mod:`halyard.traces` produces :class:`JobSpec` objects, and the
canonical CSV/JSONL files (``docs/trace-format.md``) hold exactly these columns:

============  =====  ========================  ========  =====================================
column        type   unit                      required  meaning
============  =====  ========================  ========  =====================================
job_id        str    -                         yes       unique within the trace
submit_time   float  seconds from trace start  yes       when the job arrives (>= 0)
model         str    -                         yes       a name in the model catalog
num_gpus      int    GPUs                      yes       requested GPUs (>= 1)
iterations    int    iterations                one of    work to do; 0 or unset = unknown
duration_s    float  seconds                   one of    run time on the reference allocation
batch_size    int    samples                   no        0 or unset = the model's reference
tenant        str    -                         no        unset = ``"default"``
user          str    -                         no        unset = ``""``
gpu_type      str    -                         no        GPU type constraint; unset = any
min_gpus      int    GPUs                      no        elastic jobs: fewest GPUs
max_gpus      int    GPUs                      no        elastic jobs: most GPUs
priority      int    -                         no        larger = more important; unset = 0
deadline      float  seconds from trace start  no        absolute, same clock as submit_time
logical_workers int  workers                   no        EasyScale maxP; 0 or unset = one per GPU
============  =====  ========================  ========  =====================================

"one of": a job needs ``iterations > 0`` or ``duration_s > 0`` (or both).

This module holds the column table and the row/cell helpers shared by the
readers.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from halyard.datamodel import JobSpec, ValidationError

ColumnType = Literal["str", "int", "float"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the canonical schema."""

    name: str
    type: ColumnType
    unit: str
    required: bool
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("job_id", "str", "", True, "unique job identifier"),
    Column("submit_time", "float", "s", True, "arrival, seconds from the start of the trace"),
    Column("model", "str", "", True, "model name in the performance model's catalog"),
    Column("num_gpus", "int", "GPUs", True, "requested GPUs"),
    Column("iterations", "int", "iterations", False, "total iterations; 0/unset = give duration_s"),
    Column("duration_s", "float", "s", False, "run time on the reference allocation"),
    Column("batch_size", "int", "samples", False, "global batch size; 0/unset = model reference"),
    Column("tenant", "str", "", False, "tenant (virtual cluster); unset = 'default'"),
    Column("user", "str", "", False, "submitting user"),
    Column("gpu_type", "str", "", False, "GPU type constraint; unset = any type"),
    Column("min_gpus", "int", "GPUs", False, "elastic jobs: smallest allocation"),
    Column("max_gpus", "int", "GPUs", False, "elastic jobs: largest allocation"),
    Column("priority", "int", "", False, "priority; larger is more important"),
    Column("deadline", "float", "s", False, "absolute deadline, same clock as submit_time"),
    Column("logical_workers", "int", "workers", False, "EasyScale's maxP (ESTs); 0/unset = one worker per GPU"),
)

_NO_DROPS: Mapping[str, int] = MappingProxyType({})

CANONICAL_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS)
REQUIRED_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.required)
# A job needs positive work in at least one of these (JobSpec.validate enforces it).
WORK_COLUMNS: tuple[str, str] = ("iterations", "duration_s")
COLUMN_BY_NAME = {c.name: c for c in COLUMNS}

# JobSpec fields that the canonical schema cannot carry; write_trace refuses
# jobs that set them rather than dropping them silently.
UNREPRESENTABLE_FIELDS: tuple[str, ...] = ("parallelism", "command", "env")


@dataclass(frozen=True, slots=True)
class TraceLoad:
    """What a trace reader returns.

    ``jobs`` are sorted by ``(submit_time, order in the file)``; ``errors`` are
    the rows that were skipped, each naming file, line and field. ``format`` is
    the name of the format read (``halyard.traces.FORMATS``); ``source`` the
    path read; ``dropped`` counts valid rows that are not jobs, by reason.
    """

    jobs: tuple[JobSpec, ...]
    errors: tuple[ValidationError, ...]
    format: str
    source: str
    # Valid rows that are deliberately not jobs (CPU-only pods, jobs that never
    # ran, ...), counted by reason. Not errors: --strict does not stop on them.
    dropped: Mapping[str, int] = field(default_factory=lambda: _NO_DROPS)

    @property
    def dropped_total(self) -> int:
        """Number of valid rows that were not turned into jobs (see ``dropped``)."""
        return sum(self.dropped.values())

    @property
    def skipped(self) -> int:
        """Number of rows skipped because they were invalid."""
        return len(self.errors)


SHOWN_FILES = 5  # files of a directory named where a trace file was expected
TRACE_SUFFIXES = (".csv", ".jsonl", ".json", ".trace")  # named first among a directory's files


def require_trace_file(path: str | os.PathLike[str]) -> Path:
    """``path`` if it is a file; else the error a user can act on: a directory says so and names some of
    its files (not "no such trace file", which sends a user looking for a missing file); anything else is
    "no such trace file"."""
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        files = sorted((f.name for f in p.iterdir() if f.is_file() and not f.name.startswith(".")),
                       key=lambda name: (Path(name).suffix not in TRACE_SUFFIXES, name))  # traces first
        shown = ", ".join(files[:SHOWN_FILES]) + (f", ... ({len(files)} files)" if len(files) > SHOWN_FILES else "")
        raise ValidationError(f"is a directory, not a trace file; give one of its files ({shown})" if files else
                              "is a directory, not a trace file (and holds no files)", source=str(path))
    raise ValidationError("no such trace file", source=str(path))


def csv_records(reader: Any) -> Iterator[tuple[int, list[str]]]:
    """``(line, cells)`` for each non-blank record of a ``csv.reader``.

    ``line`` is the 1-based physical line where the record starts (a quoted
    cell may span lines). Blank lines are skipped silently.
    """
    line_num = reader.line_num
    for row in reader:
        line = line_num + 1
        line_num = reader.line_num
        if row and (len(row) > 1 or row[0].strip()):
            yield line, row


def parse_int_text(text: str, field: str) -> int:
    """An integer from a text cell, or a ValidationError naming ``field``.

    Accepts optional surrounding whitespace and a sign; rejects ``"2.0"``,
    ``"1e3"`` and Python's digit separators (``"1_000"``).
    """
    try:
        if "_" in text:
            raise ValueError(text)
        return int(text)
    except ValueError:
        raise ValidationError(f"must be an integer, got {text!r}", field=field) from None


def parse_float_text(text: str, field: str) -> float:
    """A finite float from a text cell, or a ValidationError naming ``field``."""
    try:
        if "_" in text:
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise ValidationError(f"must be a number, got {text!r}", field=field) from None
    if not math.isfinite(value):
        raise ValidationError(f"must be a finite number, got {text!r}", field=field)
    return value


def _text_str(text: str, field: str) -> str:
    return text


TEXT_PARSERS: dict[ColumnType, Callable[[str, str], Any]] = {
    "str": _text_str,
    "int": parse_int_text,
    "float": parse_float_text,
}


def convert_json_value(value: Any, column: Column) -> Any:
    """Check a JSON value's type against the column; ints are accepted as floats."""
    kind = column.type
    if kind == "str":
        if isinstance(value, str):
            return value
        raise ValidationError(f"must be a string, got {json.dumps(value)}", field=column.name)
    if isinstance(value, bool):
        pass  # bool is an int subclass in Python, but not a number in a trace
    elif kind == "int" and isinstance(value, int):
        return value
    elif kind == "float" and isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond the float range
            number = math.inf
        if not math.isfinite(number):
            raise ValidationError(f"must be a finite number, got {json.dumps(value)}", field=column.name)
        return number
    noun = "an integer" if kind == "int" else "a number"
    raise ValidationError(f"must be {noun}, got {json.dumps(value)}", field=column.name)


def make_job(values: dict[str, Any], extra: dict[str, str]) -> JobSpec:
    """Build a JobSpec from converted canonical values (unset columns absent).

    Raises :class:`ValidationError` (without a location) when a required column
    is missing or JobSpec's own rules reject the row.
    """
    for name in REQUIRED_COLUMNS:
        if name not in values:
            raise ValidationError("is required but missing or empty", field=name)
    if extra:
        values["extra"] = MappingProxyType(extra)
    return JobSpec(**values)
