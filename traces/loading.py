"""Machinery shared by the real-trace loaders.

A loader streams its file row by row and, for each row, either

* reports a bad row (:meth:`TraceBuilder.error`: file, line and field; with
  ``strict`` the first one raises),
* drops a valid row that is not a job, counting it by reason
  (:meth:`TraceBuilder.drop`: CPU-only pods, jobs that never ran, ...), or
* adds a parsed job (:meth:`TraceBuilder.add`), its submit time still on the
  trace's own clock.

:meth:`TraceBuilder.finish` then assigns models to the jobs that lack one (the
seeded rule of :mod:`halyard.traces.assign`), moves the clock so that the
earliest job arrives at 0, sorts by ``(submit time, file order)`` and builds
the :class:`JobSpec` objects. A row that :class:`JobSpec` rejects is a bad row
like any other: nothing half-parsed is returned.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from halyard.datamodel import JobSpec, ValidationError
from halyard.traces.assign import assign_models, check_seed
from halyard.traces.generator import SYNERGY_DEFAULT_SPLIT, task_probabilities
from halyard.traces.schema import (
    COLUMN_BY_NAME,
    TraceLoad,
    csv_records,
    parse_float_text,
    parse_int_text,
    require_trace_file,
)

# Original fields whose name is a canonical column are kept in ``extra`` under
# this prefix (``extra`` may not repeat a canonical column: write_trace refuses).
SOURCE_PREFIX = "source_"
NAIVE_DATETIME_LEN = len("YYYY-MM-DD HH:MM:SS")
_EPOCH = dt.datetime(1970, 1, 1)  # naive origin: only differences of naive times matter


def extra_name(name: str) -> str:
    """The ``extra`` key for an original field called ``name``."""
    return SOURCE_PREFIX + name if name in COLUMN_BY_NAME else name


def originals(names: Sequence[str], row: Sequence[str], *, skip: str | None = None) -> dict[str, str]:
    """The row's original fields for ``extra``: every non-empty cell but ``skip``'s."""
    return {extra_name(n): v for n, v in zip(names, row, strict=True) if v != "" and n != skip}


def check_file(path: str | os.PathLike[str]) -> tuple[Path, str]:
    return require_trace_file(path), str(path)


def guard_unicode(source: str, fn: Callable[[], TraceLoad]) -> TraceLoad:
    """Run a reader; a file that is not UTF-8 is one error naming the file."""
    try:
        return fn()
    except UnicodeDecodeError as err:
        raise ValidationError(f"not UTF-8 text ({err.reason} at byte {err.start})", source=source) from None


def check_split(seed: int, split: Sequence[float]) -> None:
    check_seed(seed)
    task_probabilities(split)


# ------------------------------------------------------------------ cells


def require(text: str, field: str) -> str:
    if text == "":
        raise ValidationError("is required but empty", field=field)
    return text


def positive_int(text: str, field: str) -> int:
    value = parse_int_text(text, field)
    if value < 1:
        raise ValidationError(f"must be >= 1, got {text!r}", field=field)
    return value


def positive_float(text: str, field: str) -> float:
    value = parse_float_text(text, field)
    if value <= 0:
        raise ValidationError(f"must be > 0, got {text!r}", field=field)
    return value


def nonnegative_float(text: str, field: str) -> float:
    value = parse_float_text(text, field)
    if value < 0:
        raise ValidationError(f"must be >= 0, got {text!r}", field=field)
    return value


def whole_number(text: str, field: str) -> int:
    """An integer written as an integer or as an integer-valued float (``"2.0"``, as pandas writes)."""
    value = parse_float_text(text, field)
    if value != math.floor(value):
        raise ValidationError(f"must be a whole number, got {text!r}", field=field)
    return int(value)


def naive_datetime(text: str, field: str) -> float:
    """Seconds since 1970-01-01 of a zone-less ``YYYY-MM-DD HH:MM:SS`` (plain calendar arithmetic)."""
    stamp = None
    if len(text) == NAIVE_DATETIME_LEN and text[10] == " ":
        try:
            stamp = dt.datetime.fromisoformat(text)
        except ValueError:
            stamp = None
        if stamp is not None and stamp.tzinfo is not None:
            stamp = None  # right length, but with a zone ("2017-10-09 07:01+01")
    if stamp is None:
        raise ValidationError(f"must be 'YYYY-MM-DD HH:MM:SS' without a zone, got {text!r}", field=field)
    return (stamp - _EPOCH).total_seconds()


# ------------------------------------------------------------------ CSV files


class CsvTable:
    """A CSV file whose header names (at least) a format's columns, in any order.

    :meth:`rows` yields ``(line, cells, others)``: ``cells`` in the order of
    ``columns``, ``others`` the non-empty cells of any further columns (kept in
    ``extra`` by the loaders). A record with the wrong number of cells is
    reported as a bad row and not yielded; blank lines are skipped.
    """

    def __init__(self, p: Path, source: str, columns: Sequence[str], fmt: str) -> None:
        self.path = p
        self.source = source
        self.columns = tuple(columns)
        self.fmt = fmt

    def rows(self, builder: TraceBuilder) -> Iterator[tuple[int, list[str], dict[str, str]]]:
        with self.path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise ValidationError(f"empty file; a {self.fmt} trace starts with the header "
                                      f"{','.join(self.columns)}", source=self.source, line=1)
            missing = [c for c in self.columns if c not in header]
            if missing or len(set(header)) != len(header):
                raise ValidationError(
                    f"not a {self.fmt} header: expected the columns {','.join(self.columns)}, "
                    f"got {','.join(header)!r}", source=self.source, line=1,
                    field=missing[0] if missing else None)
            positions = [header.index(c) for c in self.columns]
            rest = [(i, extra_name(n)) for i, n in enumerate(header) if n not in self.columns]
            width = len(header)
            in_order = positions == list(range(len(positions))) and not rest
            for line, row in csv_records(reader):
                if len(row) != width:
                    builder.error(ValidationError(f"expected {width} cells (one per header column), "
                                                  f"got {len(row)}"), line)
                    continue
                if in_order:
                    yield line, row, {}
                else:
                    yield line, [row[i] for i in positions], {n: row[i] for i, n in rest if row[i] != ""}


# ------------------------------------------------------------------ building


class TraceBuilder:
    """Collects a loader's parsed jobs, bad rows and dropped rows; builds the TraceLoad."""

    def __init__(self, fmt: str, source: str, *, strict: bool, seed: int = 0,
                 split: Sequence[float] = SYNERGY_DEFAULT_SPLIT, rebase: bool = True) -> None:
        check_split(seed, split)
        self.fmt = fmt
        self.source = source
        self.strict = strict
        self.seed = seed
        self.split = tuple(split)
        self.rebase = rebase
        self.errors: list[ValidationError] = []
        self.dropped: Counter[str] = Counter()
        # (time, seq, line, source, job_id, model or None, key, deadline, fields)
        self._rows: list[tuple[float, int, int, str, str, str | None, int, float | None, dict[str, Any]]] = []
        self._first_line: dict[str, int] = {}

    def error(self, err: ValidationError, line: int | None, source: str | None = None) -> None:
        located = err.at(source=source or self.source, line=line)
        if self.strict:
            raise located
        self.errors.append(located)

    def drop(self, reason: str) -> None:
        self.dropped[reason] += 1

    def add(self, *, line: int, time: float, job_id: str, fields: dict[str, Any], model: str | None = None,
            key: int = 0, deadline: float | None = None, source: str | None = None) -> None:
        """One parsed job. ``model=None``: assign by the seeded rule from ``key``.

        ``time`` and ``deadline`` are seconds on the trace's clock; ``fields`` are
        the other :class:`JobSpec` keyword arguments.
        """
        if not math.isfinite(time):
            self.error(ValidationError(f"submit time must be finite, got {time!r}"), line, source)
            return
        first = self._first_line.get(job_id)
        if first is not None:
            self.error(ValidationError(f"duplicate job id {job_id!r}: also on line {first} (this row is skipped)",
                                       field="job_id"), line, source)
            return
        self._first_line[job_id] = line
        self._rows.append((time, len(self._rows), line, source or self.source, job_id, model, key, deadline,
                           fields))

    def finish(self) -> TraceLoad:
        rows = self._rows
        rows.sort(key=lambda r: (r[0], r[1]))
        need = [i for i, r in enumerate(rows) if r[5] is None]
        assigned = assign_models([rows[i][6] for i in need], seed=self.seed, split=self.split) if need else []
        models: dict[int, str] = dict(zip(need, assigned, strict=True))
        origin = rows[0][0] if rows and self.rebase else 0.0
        jobs: list[JobSpec] = []
        for i, (time, _, line, source, job_id, model, _key, deadline, fields) in enumerate(rows):
            try:
                job = JobSpec(job_id=job_id, submit_time=time - origin, model=model or models[i],
                              deadline=None if deadline is None else deadline - origin, **fields)
            except ValidationError as err:
                self.error(err, line, source)
                continue
            jobs.append(job)
        self.errors.sort(key=lambda e: (e.source or "", e.line or 0))
        return TraceLoad(jobs=tuple(jobs), errors=tuple(self.errors), format=self.fmt, source=self.source,
                         dropped=MappingProxyType(dict(self.dropped)))


def frozen(extra: dict[str, str]) -> MappingProxyType[str, str]:
    return MappingProxyType(extra)
