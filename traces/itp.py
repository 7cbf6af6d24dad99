"""Microsoft ITP job traces as published with ElasticFlow (microsoft/elasticflow-traces, ASPLOS '23).

Two CSV forms (``shared/traces/README.md`` §4a), one row per job, sorted by
submission time:

* raw (``itp-raw``): ``job_id,submission_time,duration,num_gpu``;
* annotated (``itp-annotated``): ``job_id,submission_time,num_iteration,
  model_name,deadline,batch_size,num_gpu,duration``. ``job_id``,
  ``submission_time``, ``num_gpu`` and ``duration`` are the real values; the
  model, iterations, batch size and deadline were generated at random by the
  ElasticFlow authors.

Rules (``docs/trace-format.md``):

* ``submission_time``: seconds since the start of collection (no time zone
  involved); ``submit_time`` = ``submission_time`` minus the earliest one read.
* ``job_id`` = the trace's ``job_id`` (a UUID); ``num_gpus`` = ``num_gpu``.
* ``duration_s`` = ``duration`` (real), ``iterations`` = 0: the performance model
  converts the real run time. The synthetic ``num_iteration`` and
  ``batch_size`` stay in ``extra`` only (they belong to ElasticFlow's own
  throughput model and the annotated model, which is often a stand-in here).
* Raw: the model is assigned by the seeded rule keyed by the job id.
  Annotated: ``model_name`` is mapped by :data:`halyard.traces.models.ITP_MODELS`
  (an unknown name is a bad row); ``deadline`` (absolute, same clock as
  ``submission_time``) becomes ``JobSpec.deadline`` on the moved clock.
* ``extra`` keeps every original field but ``job_id`` as written
  (``batch_size`` as ``source_batch_size``).
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
    frozen,
    guard_unicode,
    nonnegative_float,
    originals,
    positive_float,
    positive_int,
    require,
)
from halyard.traces.models import ITP_MODELS
from halyard.traces.schema import TraceLoad, parse_float_text

ITP_RAW_FORMAT = "itp-raw"
ITP_ANNOTATED_FORMAT = "itp-annotated"
ITP_RAW_COLUMNS: tuple[str, ...] = ("job_id", "submission_time", "duration", "num_gpu")
ITP_ANNOTATED_COLUMNS: tuple[str, ...] = (
    "job_id", "submission_time", "num_iteration", "model_name", "deadline", "batch_size", "num_gpu", "duration")


def is_annotated(header: Sequence[str]) -> bool:
    return set(ITP_ANNOTATED_COLUMNS) <= set(header)


def read_itp(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 0,
             split: Sequence[float] = SYNERGY_DEFAULT_SPLIT, annotated: bool | None = None) -> TraceLoad:
    """Read an ITP trace, raw or annotated (``annotated=None``: decided by the header)."""
    p, source = check_file(path)

    def run() -> TraceLoad:
        want = annotated
        if want is None:
            with p.open(encoding="utf-8-sig", newline="") as f:
                want = is_annotated(f.readline().strip().split(","))
        if want:
            return _read_annotated(p, source, strict)
        return _read_raw(p, source, strict, seed, split)

    return guard_unicode(source, run)


def _read_raw(p: Path, source: str, strict: bool, seed: int, split: Sequence[float]) -> TraceLoad:
    b = TraceBuilder(ITP_RAW_FORMAT, source, strict=strict, seed=seed, split=split)
    for line, cells, others in CsvTable(p, source, ITP_RAW_COLUMNS, ITP_RAW_FORMAT).rows(b):
        try:
            job_id, submitted, duration, gpus = cells
            require(job_id, "job_id")
            fields = {
                "num_gpus": positive_int(gpus, "num_gpu"),
                "duration_s": positive_float(duration, "duration"),
                "extra": frozen(originals(ITP_RAW_COLUMNS, cells, skip="job_id") | others),
            }
            time = nonnegative_float(submitted, "submission_time")
        except ValidationError as err:
            b.error(err, line)
            continue
        b.add(line=line, time=time, job_id=job_id, fields=fields, key=text_key(job_id))
    return b.finish()


def _read_annotated(p: Path, source: str, strict: bool) -> TraceLoad:
    b = TraceBuilder(ITP_ANNOTATED_FORMAT, source, strict=strict)
    for line, cells, others in CsvTable(p, source, ITP_ANNOTATED_COLUMNS, ITP_ANNOTATED_FORMAT).rows(b):
        try:
            job_id, submitted, iterations, model_name, deadline, batch, gpus, duration = cells
            require(job_id, "job_id")
            mapping = ITP_MODELS.get(model_name)
            if mapping is None:
                raise ValidationError(f"unknown model {model_name!r} (known: {', '.join(ITP_MODELS)})",
                                      field="model_name")
            positive_int(iterations, "num_iteration")  # checked, kept in extra only
            positive_int(batch, "batch_size")
            fields = {
                "num_gpus": positive_int(gpus, "num_gpu"),
                "duration_s": positive_float(duration, "duration"),
                "extra": frozen(originals(ITP_ANNOTATED_COLUMNS, cells, skip="job_id") | others),
            }
            time = nonnegative_float(submitted, "submission_time")
            due = parse_float_text(deadline, "deadline") if deadline != "" else None
            if due is not None and due < time:
                raise ValidationError(f"is before submission_time ({deadline} < {submitted})", field="deadline")
        except ValidationError as err:
            b.error(err, line)
            continue
        b.add(line=line, time=time, job_id=job_id, fields=fields, model=mapping.model, deadline=due)
    return b.finish()
