"""The trace formats Halyard reads, how each is recognised, and :func:`read_trace`.

Detection looks at the file's name and its first bytes only (the header row,
or the first line of a headerless format), never at the whole file; the
first format in :data:`FORMATS` whose test matches wins. ``format=NAME`` skips
detection; the reader then checks the file and raises if it is not that format.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from halyard.datamodel import ValidationError
from halyard.traces import alibaba, canonical, gavel, helios, itp, pai, philly, philly_raw, pollux
from halyard.traces.schema import CANONICAL_COLUMNS, TraceLoad, require_trace_file

AUTO = "auto"
_HEAD_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Head:
    """What detection sees: the file name and its first line(s)."""

    path: Path
    text: str  # the first 64 KiB, decoded leniently
    first_line: str  # the first non-blank line, without its line ending
    header: tuple[str, ...]  # first_line parsed as a CSV row

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower()

    def has_columns(self, columns: tuple[str, ...]) -> bool:
        return set(columns) <= set(self.header)


@dataclass(frozen=True, slots=True)
class TraceFormat:
    name: str
    recognised_by: str
    detect: Callable[[Head], bool]
    read: Callable[[Path, bool, int], TraceLoad]  # (path, strict, seed)


def _header_is(columns: tuple[str, ...]) -> Callable[[Head], bool]:
    return lambda h: h.has_columns(columns)


FORMATS: tuple[TraceFormat, ...] = (
    TraceFormat(
        canonical.CANONICAL_JSONL_FORMAT, "suffix .jsonl, or a first line that is a JSON object (canonical JSON Lines)",
        lambda h: h.suffix == ".jsonl" or h.first_line.startswith("{"),
        lambda p, strict, seed: canonical.read_canonical_jsonl(p, strict=strict)),
    TraceFormat(
        canonical.CANONICAL_CSV_FORMAT,
        f"a header starting {CANONICAL_COLUMNS[0]},{CANONICAL_COLUMNS[1]} (canonical CSV)",
        lambda h: canonical.is_canonical_header(list(h.header)),
        lambda p, strict, seed: canonical.read_canonical_csv(p, strict=strict)),
    TraceFormat(
        philly.PHILLY_FORMAT, f"the header {','.join(philly.PHILLY_COLUMNS)} (processed Philly, Pollux artifact)",
        lambda h: h.header == philly.PHILLY_COLUMNS,
        lambda p, strict, seed: philly.read_philly(p, strict=strict, seed=seed)),
    TraceFormat(
        philly_raw.PHILLY_RAW_FORMAT, "a JSON array whose objects have \"jobid\" and \"attempts\" "
                                      "(Philly cluster_job_log)",
        philly_raw.looks_like_philly_raw,
        lambda p, strict, seed: philly_raw.read_philly_raw(p, strict=strict, seed=seed)),
    TraceFormat(
        itp.ITP_ANNOTATED_FORMAT, f"the columns {','.join(itp.ITP_ANNOTATED_COLUMNS)} (ElasticFlow annotated ITP)",
        _header_is(itp.ITP_ANNOTATED_COLUMNS),
        lambda p, strict, seed: itp.read_itp(p, strict=strict, seed=seed, annotated=True)),
    TraceFormat(
        itp.ITP_RAW_FORMAT, f"the columns {','.join(itp.ITP_RAW_COLUMNS)} (ElasticFlow raw ITP)",
        _header_is(itp.ITP_RAW_COLUMNS),
        lambda p, strict, seed: itp.read_itp(p, strict=strict, seed=seed, annotated=False)),
    TraceFormat(
        gavel.GAVEL_FORMAT, "7 tab-separated fields, no header, needs_data_dir 0/1 (Gavel .trace)",
        lambda h: gavel.looks_like_gavel(h.first_line),
        lambda p, strict, seed: gavel.read_gavel(p, strict=strict)),
    TraceFormat(
        pollux.POLLUX_FORMAT, f"the columns {','.join(pollux.POLLUX_COLUMNS)} (Pollux workload)",
        _header_is(pollux.POLLUX_COLUMNS),
        lambda p, strict, seed: pollux.read_pollux(p, strict=strict, seed=seed)),
    TraceFormat(
        alibaba.ALIBABA_FORMAT, f"the columns {','.join(alibaba.ALIBABA_COLUMNS)} (Alibaba GPU v2023 pod list)",
        _header_is(alibaba.ALIBABA_COLUMNS),
        lambda p, strict, seed: alibaba.read_alibaba(p, strict=strict, seed=seed)),
    TraceFormat(
        helios.HELIOS_FORMAT, f"the columns {','.join(helios.HELIOS_COLUMNS)} (Helios cluster_log.csv)",
        _header_is(helios.HELIOS_COLUMNS),
        lambda p, strict, seed: helios.read_helios(p, strict=strict, seed=seed)),
    TraceFormat(
        pai.PAI_FORMAT, "a headerless pai_job_table / pai_task_table row (Alibaba PAI v2020; "
                        "the two tables side by side)",
        lambda h: pai.looks_like_pai(h.path, h.header),
        lambda p, strict, seed: pai.read_pai(p, strict=strict, seed=seed)),
)
FORMAT_BY_NAME: dict[str, TraceFormat] = {f.name: f for f in FORMATS}
FORMAT_NAMES: tuple[str, ...] = tuple(FORMAT_BY_NAME)

# The formats read_trace recognises, with how it recognises them.
ACCEPTED_FORMATS: dict[str, str] = {f.name: f.recognised_by for f in FORMATS}


def _accepted() -> str:
    return "accepted formats: " + "; ".join(f"{k}: {v}" for k, v in ACCEPTED_FORMATS.items())


def read_head(path: Path) -> Head:
    with path.open("rb") as f:
        raw = f.read(_HEAD_BYTES)
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    header: tuple[str, ...] = ()
    if first:
        try:
            header = tuple(next(csv.reader([first]), []))
        except csv.Error:
            header = ()
    return Head(path=path, text=text, first_line=first, header=header)


def detect_format(path: str | os.PathLike[str]) -> TraceFormat:
    """The format of a trace file, by its name and first bytes; raises listing the accepted formats."""
    p = require_trace_file(path)
    head = read_head(p)
    for fmt in FORMATS:
        if fmt.detect(head):
            return fmt
    if not head.first_line:
        raise ValidationError(f"empty file; {_accepted()}", source=str(path), line=1)
    shown = head.first_line if len(head.first_line) <= 120 else head.first_line[:117] + "..."
    raise ValidationError(f"unrecognised trace format (first line {shown!r}); {_accepted()}",
                          source=str(path), line=1)


def read_trace(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 0,
               format: str = AUTO) -> TraceLoad:
    """Read a trace file of any format in :data:`FORMATS` (``format="auto"``: detected).

    Jobs come back sorted by ``(submit_time, file order)``. Invalid rows are
    skipped and listed in ``TraceLoad.errors``; with ``strict=True`` the first
    one raises its :class:`ValidationError` instead. Valid rows that are not
    jobs (CPU-only pods, ...) are counted in ``TraceLoad.dropped``. Problems
    with the file as a whole (missing, unrecognised, a header lacking a
    column) always raise.

    ``seed`` seeds the attributes a format lacks (models, Pollux job lengths);
    canonical files carry every attribute, so it does not affect them.
    """
    fmt = resolve_format(path, format)
    return fmt.read(Path(path), strict, seed)


def resolve_format(path: str | os.PathLike[str], format: str = AUTO) -> TraceFormat:
    """``format`` by name, or the detected one for ``"auto"``."""
    if format == AUTO:
        return detect_format(path)
    try:
        return FORMAT_BY_NAME[format]
    except KeyError:
        raise ValidationError(f"unknown trace format {format!r}; one of: {AUTO}, {', '.join(FORMAT_NAMES)}",
                              field="format") from None


def format_names() -> tuple[str, ...]:
    return FORMAT_NAMES

