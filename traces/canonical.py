"""Read and write traces in the canonical CSV / JSONL format.

``read_canonical_csv`` / ``read_canonical_jsonl`` stream the file row by row (the ``csv`` module, or line
iteration for JSONL), validates every row into a :class:`JobSpec` and either
skips bad rows, recording each :class:`ValidationError` with file, line and
field, or (``strict=True``) raises the first one.

``write_trace`` writes the same format, chosen by suffix; what it writes reads
back to equal :class:`JobSpec` objects (floats are written with ``repr``, which
round-trips exactly). It refuses, before writing anything, jobs that the format
cannot represent instead of dropping information.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from halyard.datamodel import JobSpec, ValidationError
from halyard.traces.loading import check_file, guard_unicode
from halyard.traces.schema import (
    CANONICAL_COLUMNS,
    COLUMN_BY_NAME,
    COLUMNS,
    REQUIRED_COLUMNS,
    TEXT_PARSERS,
    UNREPRESENTABLE_FIELDS,
    WORK_COLUMNS,
    TraceLoad,
    convert_json_value,
    csv_records,
    make_job,
)

CANONICAL_CSV_FORMAT = "csv"
CANONICAL_JSONL_FORMAT = "jsonl"


def is_canonical_header(header: list[str]) -> bool:
    return header[:2] == list(CANONICAL_COLUMNS[:2])


class _Collector:
    """Gathers valid jobs and row errors; checks job_id uniqueness."""

    def __init__(self, source: str, strict: bool) -> None:
        self.source = source
        self.strict = strict
        self.jobs: list[JobSpec] = []
        self.errors: list[ValidationError] = []
        self.first_line: dict[str, int] = {}

    def add(self, job: JobSpec, line: int) -> None:
        first = self.first_line.get(job.job_id)
        if first is not None:
            self.error(ValidationError(
                f"duplicate job_id {job.job_id!r}: also on line {first} (this row is skipped)",
                field="job_id"), line)
            return
        self.first_line[job.job_id] = line
        self.jobs.append(job)

    def error(self, err: ValidationError, line: int) -> None:
        located = err.at(source=self.source, line=line)
        if self.strict:
            raise located
        self.errors.append(located)

    def result(self, fmt: str) -> TraceLoad:
        jobs = sorted(self.jobs, key=lambda j: j.submit_time)  # stable: ties keep file order
        return TraceLoad(jobs=tuple(jobs), errors=tuple(self.errors), format=fmt, source=self.source)


def read_canonical_csv(path: str | os.PathLike[str], *, strict: bool = False) -> TraceLoad:
    """Read a canonical CSV trace (any suffix); the header must start ``job_id,submit_time``."""
    p, source = check_file(path)

    def run() -> TraceLoad:
        with p.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise ValidationError("empty file, expected a header row", source=source, line=1)
            if not is_canonical_header(header):
                raise ValidationError(f"a canonical CSV header starts with {CANONICAL_COLUMNS[0]},"
                                      f"{CANONICAL_COLUMNS[1]}; got {','.join(header)!r}", source=source, line=1)
            return _read_csv_rows(reader, header, source, strict)

    return guard_unicode(source, run)


def read_canonical_jsonl(path: str | os.PathLike[str], *, strict: bool = False) -> TraceLoad:
    """Read a canonical JSON Lines trace (any suffix)."""
    p, source = check_file(path)
    return guard_unicode(source, lambda: _read_jsonl(p, source, strict))


def _check_header(header: list[str], source: str) -> None:
    def bad(msg: str, field: str | None = None) -> ValidationError:
        return ValidationError(msg, source=source, line=1, field=field)

    seen: set[str] = set()
    for name in header:
        if not name:
            raise bad("header has an empty column name")
        if name in seen:
            raise bad("column appears twice in the header", field=name)
        seen.add(name)
    for name in REQUIRED_COLUMNS:
        if name not in seen:
            raise bad("required column is missing from the header", field=name)
    if not seen.intersection(WORK_COLUMNS):
        raise bad(f"header needs a {WORK_COLUMNS[0]} or a {WORK_COLUMNS[1]} column", field=WORK_COLUMNS[0])


def _read_csv_rows(reader: Any, header: list[str], source: str, strict: bool) -> TraceLoad:
    """The data rows of a canonical CSV; ``reader`` is a ``csv.reader`` past the header."""
    _check_header(header, source)
    ncols = len(header)
    plan = [(i, name, COLUMN_BY_NAME.get(name)) for i, name in enumerate(header)]
    parsers = [TEXT_PARSERS[c.type] if c is not None else None for _, _, c in plan]
    out = _Collector(source, strict)
    for line, row in csv_records(reader):
        try:
            if len(row) != ncols:
                raise ValidationError(f"expected {ncols} cells (one per header column), got {len(row)}")
            values: dict[str, Any] = {}
            extra: dict[str, str] = {}
            for (i, name, _), parse in zip(plan, parsers, strict=True):
                cell = row[i]
                if cell == "":
                    continue  # empty cell = unset
                if parse is None:
                    extra[name] = cell
                else:
                    values[name] = parse(cell, name)
            job = make_job(values, extra)
        except ValidationError as err:
            out.error(err, line)
            continue
        out.add(job, line)
    return out.result("csv")


def _read_jsonl(p: Path, source: str, strict: bool) -> TraceLoad:
    out = _Collector(source, strict)
    # newline="\n": only "\n" ends a line, so line numbers are physical lines.
    with p.open(encoding="utf-8-sig", newline="\n") as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                job = _job_from_json(text)
            except ValidationError as err:
                out.error(err, line)
                continue
            out.add(job, line)
    return out.result("jsonl")


def _job_from_json(text: str) -> JobSpec:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValidationError(f"not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(obj, dict):
        raise ValidationError(f"each line must be a JSON object, got {type(obj).__name__}")
    values: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for key, value in obj.items():
        column = COLUMN_BY_NAME.get(key)
        if column is None:
            # Unknown keys are kept, as text, in JobSpec.extra.
            extra[key] = value if isinstance(value, str) else json.dumps(value)
        elif value is not None:  # null = unset
            values[key] = convert_json_value(value, column)
    return make_job(values, extra)


# --------------------------------------------------------------------- writing


def write_trace(jobs: Iterable[JobSpec], path: str | os.PathLike[str]) -> None:
    """Write ``jobs`` in file order to ``path``: canonical CSV for ``.csv``, JSONL for ``.jsonl``.

    Columns are :data:`CANONICAL_COLUMNS` followed by the keys of ``extra``
    (in order of first appearance). Unset values are empty cells (CSV) or
    absent keys (JSONL). Raises :class:`ValidationError`, before creating the
    file, for a job the format cannot represent: one with ``parallelism``,
    ``command`` or ``env`` set, an ``extra`` key that is a canonical column, or
    (CSV only) an empty string where an empty cell would read back differently.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".csv", ".jsonl"):
        raise ValidationError(f"cannot write {suffix!r}: use .csv or .jsonl", source=str(path))
    records = [_record(job, for_csv=suffix == ".csv") for job in jobs]
    if suffix == ".jsonl":
        with p.open("w", encoding="utf-8", newline="\n") as f:
            for values, extra in records:
                f.write(json.dumps(values | extra, ensure_ascii=False))
                f.write("\n")
        return
    extra_columns: dict[str, None] = {}
    for _, extra in records:
        extra_columns.update(dict.fromkeys(extra))
    header = [*CANONICAL_COLUMNS, *extra_columns]
    with p.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        # Python 3.11's minimal quoting only quotes characters of the line
        # terminator ("\n"), so a cell holding "\r" would split its row on
        # reading; such rows are written with every cell quoted.
        quote_all = csv.writer(f, lineterminator="\n", quoting=csv.QUOTE_ALL)
        for cells in _csv_rows(header, records):
            (quote_all if any("\r" in c for c in cells) else writer).writerow(cells)


def _csv_rows(header: list[str], records: list[tuple[dict[str, Any], dict[str, str]]]) -> Iterator[list[str]]:
    yield header
    for values, extra in records:
        by_name = values | extra
        yield [_cell(by_name.get(name)) for name in header]


# Columns whose default is "", so that an empty CSV cell reads back as "".
_EMPTY_STRING_DEFAULTS = frozenset(f.name for f in dataclasses.fields(JobSpec) if f.default == "")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _record(job: JobSpec, *, for_csv: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """The job's canonical values (unset ones left out) and its extra fields."""

    def bad(msg: str, field: str) -> ValidationError:
        return ValidationError(f"job {job.job_id!r}: {msg}", field=field)

    for name in UNREPRESENTABLE_FIELDS:
        if getattr(job, name):
            raise bad("the canonical trace format has no column for this field", name)
    values: dict[str, Any] = {}
    for column in COLUMNS:
        value = getattr(job, column.name)
        if value is None:
            continue
        if column.type == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(f"must be an int to be written, got {value!r}", column.name)
        elif column.type == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise bad(f"must be a number to be written, got {value!r}", column.name)
            value = float(value)
        elif not isinstance(value, str):
            raise bad(f"must be a string to be written, got {value!r}", column.name)
        elif for_csv and value == "" and column.name not in _EMPTY_STRING_DEFAULTS:
            # "" would be an empty cell, which reads back as the column's default.
            raise bad("an empty string cannot be written to CSV (an empty cell means unset)", column.name)
        values[column.name] = value
    extra: dict[str, str] = {}
    for key, value in job.extra.items():
        if not key:
            raise bad("extra has an empty key", "extra")
        if key in COLUMN_BY_NAME:
            raise bad(f"extra key {key!r} clashes with a canonical column", "extra")
        if not isinstance(value, str):
            raise bad(f"extra[{key!r}] must be a string, got {value!r}", "extra")
        if for_csv and value == "":
            raise bad(f"extra[{key!r}] is empty, which CSV cannot tell from unset", "extra")
        extra[key] = value
    return values, extra
