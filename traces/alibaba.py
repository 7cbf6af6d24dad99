"""Alibaba GPU cluster trace v2023 pod lists (alibaba/clusterdata ``cluster-trace-gpu-v2023``).

``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time``, one pod per row, sorted by
``creation_time`` (``shared/traces/README.md`` §2b). The files carry no
redistribution licence: Halyard reads them from where the user keeps them and
ships none.

Rules (``docs/trace-format.md``):

* Times are integer seconds relative to the trace start (no time zone).
  ``submit_time`` = ``creation_time`` minus the earliest one read.
* ``job_id`` = ``name``. ``duration_s`` = ``deletion_time - scheduled_time`` (the
  time the pod held its GPUs), ``iterations`` = 0. Pods still running at the
  trace end have ``deletion_time`` = the trace end, so their run time is a
  lower bound (right-censored); they are kept.
* **Fractional GPUs.** ``gpu_milli`` is the per-GPU share in thousandths
  (460 = 46 % of one GPU). The scheduler allocates whole GPUs, so
  ``num_gpus = ceil(num_gpu * gpu_milli / 1000)``: a pod sharing part of one
  GPU gets one whole GPU. The original ``num_gpu`` and ``gpu_milli`` stay in
  ``extra``, and ``extra["gpu_fraction"]`` is ``num_gpu * gpu_milli / 1000`` as
  written by ``repr``. ``gpu_milli`` must be in 1..1000 when ``num_gpu`` >= 1.
* Dropped, not errors: CPU-only pods (``num_gpu`` = 0), pods never scheduled
  (``scheduled_time`` empty: every ``Pending`` pod), pods with a zero run time.
* Bad rows: a cell that does not parse, ``deletion_time`` before
  ``scheduled_time`` or ``scheduled_time`` before ``creation_time``.
* ``gpu_spec`` (allowed GPU types, ``|``-separated) is kept in ``extra`` and not
  made a ``gpu_type`` constraint (it may list several types; it is empty in the
  default pod list). ``qos`` and ``pod_phase`` are kept in ``extra`` as well;
  ``tenant`` stays ``default`` (the trace has no tenants).
* ``model``: the seeded rule keyed by ``name``.
"""

from __future__ import annotations

import math
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
    require,
)
from halyard.traces.schema import TraceLoad, parse_int_text

ALIBABA_FORMAT = "alibaba-v2023"
ALIBABA_COLUMNS: tuple[str, ...] = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
    "creation_time", "deletion_time", "scheduled_time")
MILLI_PER_GPU = 1000

DROP_CPU_ONLY = "CPU-only pod (num_gpu = 0)"
DROP_NEVER_SCHEDULED = "never scheduled (no scheduled_time)"
DROP_ZERO_RUN = "zero run time (deletion_time = scheduled_time)"


def whole_gpus(num_gpu: int, gpu_milli: int) -> int:
    """Whole GPUs for a pod asking ``num_gpu`` GPUs at ``gpu_milli``/1000 each: rounded up."""
    return math.ceil(num_gpu * gpu_milli / MILLI_PER_GPU)


def read_alibaba(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 0,
                 split: Sequence[float] = SYNERGY_DEFAULT_SPLIT) -> TraceLoad:
    """Read an Alibaba v2023 pod list (module docstring for the rules)."""
    p, source = check_file(path)
    return guard_unicode(source, lambda: _read(p, source, strict, seed, split))


def _read(p: Path, source: str, strict: bool, seed: int, split: Sequence[float]) -> TraceLoad:
    b = TraceBuilder(ALIBABA_FORMAT, source, strict=strict, seed=seed, split=split)
    for line, cells, others in CsvTable(p, source, ALIBABA_COLUMNS, ALIBABA_FORMAT).rows(b):
        try:
            name, cpu, memory, num_gpu, gpu_milli, _spec, _qos, _phase, created, deleted, scheduled = cells
            require(name, "name")
            parse_int_text(cpu, "cpu_milli")
            parse_int_text(memory, "memory_mib")
            gpus = parse_int_text(num_gpu, "num_gpu")
            milli = parse_int_text(gpu_milli, "gpu_milli")
            created_s = nonnegative_float(created, "creation_time")
            if gpus < 0:
                raise ValidationError(f"must be >= 0, got {num_gpu!r}", field="num_gpu")
            if gpus == 0:
                b.drop(DROP_CPU_ONLY)
                continue
            if not 0 < milli <= MILLI_PER_GPU:
                raise ValidationError(f"must be in 1..{MILLI_PER_GPU} for a GPU pod, got {gpu_milli!r}",
                                      field="gpu_milli")
            if scheduled == "":
                b.drop(DROP_NEVER_SCHEDULED)
                continue
            scheduled_s = nonnegative_float(scheduled, "scheduled_time")
            deleted_s = nonnegative_float(require(deleted, "deletion_time"), "deletion_time")
            if scheduled_s < created_s:
                raise ValidationError(f"is before creation_time ({scheduled} < {created})", field="scheduled_time")
            if deleted_s < scheduled_s:
                raise ValidationError(f"is before scheduled_time ({deleted} < {scheduled})", field="deletion_time")
            if deleted_s == scheduled_s:
                b.drop(DROP_ZERO_RUN)
                continue
            extra = originals(ALIBABA_COLUMNS, cells, skip="name") | others
            extra["gpu_fraction"] = repr(gpus * milli / MILLI_PER_GPU)
            fields = {"num_gpus": whole_gpus(gpus, milli), "duration_s": deleted_s - scheduled_s,
                      "extra": frozen(extra)}
        except ValidationError as err:
            b.error(err, line)
            continue
        b.add(line=line, time=created_s, job_id=name, fields=fields, key=text_key(name))
    return b.finish()
