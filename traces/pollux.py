"""Pollux workload CSVs (petuum/adaptdl ``osdi21-artifact``, ``simulator/workloads/*.csv``).

``name,time,application,num_replicas,batch_size``, one job per row
(``shared/traces/README.md`` §4c). The workloads were drawn from the processed
Philly file by ``simulator/workload.py``: a Philly job's GPU time picks the
application (< 1 GPU-hour: cifar10 or ncf; < 10: deepspeech2 or bert; < 100:
yolov3; otherwise imagenet, and the script drops jobs of 1,000 GPU-hours or
more and jobs shorter than 60 s); replicas and batch size come from the
application's profiled configurations. **The file has no job length**: Pollux
trains each job to convergence.

Rules (``docs/trace-format.md``):

* ``job_id`` = ``name``; ``submit_time`` = ``time`` (seconds since the start of
  the workload window) minus the earliest one read; ``num_gpus`` =
  ``num_replicas``; ``model`` = ``application`` mapped by
  :data:`halyard.traces.models.POLLUX_MODELS` (an unknown one is a bad row).
* Length (synthetic, seeded): the GPU time is drawn log-uniformly from the
  application's bucket above, ``g = lo * (hi / lo) ** u`` GPU-hours with
  ``u = H(seed, text_key(name), 2)`` (:mod:`halyard.traces.assign`), and
  ``duration_s = g * 3600 / num_replicas``. Buckets: cifar10/ncf
  [1/60, 1), deepspeech2/bert [1, 10), yolov3 [10, 100), imagenet [100, 1000)
  GPU-hours (the lower 1/60 is the script's 60 s minimum on one GPU).
* ``batch_size`` (Pollux's global batch size) stays in ``extra`` as
  ``source_batch_size``; ``JobSpec.batch_size`` is 0 (the catalog reference).
* ``extra`` keeps ``time``, ``application``, ``num_replicas`` and the batch size
  as written, and ``gpu_hours`` (the drawn GPU time, ``repr`` of the float).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from halyard.datamodel import ValidationError
from halyard.traces.assign import text_key, uniform
from halyard.traces.loading import (
    CsvTable,
    TraceBuilder,
    check_file,
    frozen,
    guard_unicode,
    nonnegative_float,
    originals,
    positive_int,
    require,
)
from halyard.traces.models import POLLUX_MODELS
from halyard.traces.schema import TraceLoad

POLLUX_FORMAT = "pollux"
POLLUX_COLUMNS: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")
SECONDS_PER_HOUR = 3600.0
# GPU-hour buckets of simulator/workload.py (adaptdl osdi21-artifact), by application.
_SMALL_LOW_GPU_H = 60.0 / SECONDS_PER_HOUR  # workload.py keeps jobs of >= 60 s
POLLUX_GPU_HOURS: Mapping[str, tuple[float, float]] = MappingProxyType({
    "cifar10": (_SMALL_LOW_GPU_H, 1.0),
    "ncf": (_SMALL_LOW_GPU_H, 1.0),
    "deepspeech2": (1.0, 10.0),
    "bert": (1.0, 10.0),
    "yolov3": (10.0, 100.0),
    "imagenet": (100.0, 1000.0),
})
LENGTH_DRAW = 2  # draws 0 and 1 are the model rule's; the length uses its own


def read_pollux(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 0) -> TraceLoad:
    """Read a Pollux workload CSV (module docstring for the rules)."""
    p, source = check_file(path)
    return guard_unicode(source, lambda: _read(p, source, strict, seed))


def _read(p: Path, source: str, strict: bool, seed: int) -> TraceLoad:
    b = TraceBuilder(POLLUX_FORMAT, source, strict=strict, seed=seed)
    parsed = []
    for line, cells, others in CsvTable(p, source, POLLUX_COLUMNS, POLLUX_FORMAT).rows(b):
        try:
            name, time_text, application, replicas, batch = cells
            require(name, "name")
            mapping = POLLUX_MODELS.get(application)
            if mapping is None:
                raise ValidationError(f"unknown application {application!r} (known: {', '.join(POLLUX_MODELS)})",
                                      field="application")
            positive_int(batch, "batch_size")
            gpus = positive_int(replicas, "num_replicas")
            time = nonnegative_float(time_text, "time")
        except ValidationError as err:
            b.error(err, line)
            continue
        parsed.append((line, name, time, gpus, mapping.model, application,
                       originals(POLLUX_COLUMNS, cells, skip="name") | others))
    # One vectorised draw for all lengths.
    draws = uniform(seed, [text_key(r[1]) for r in parsed], LENGTH_DRAW).tolist() if parsed else []
    for (line, name, time, gpus, model, application, extra), u in zip(parsed, draws, strict=True):
        low, high = POLLUX_GPU_HOURS[application]
        gpu_hours = low * (high / low) ** u
        extra["gpu_hours"] = repr(gpu_hours)
        fields = {"num_gpus": gpus, "duration_s": gpu_hours * SECONDS_PER_HOUR / gpus, "extra": frozen(extra)}
        b.add(line=line, time=time, job_id=name, fields=fields, model=model)
    return b.finish()
