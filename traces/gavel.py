"""Gavel ``.trace`` files (stanford-futuredata/gavel, OSDI '20), the 7-field form.

Tab-separated, no header, one job per line (``shared/traces/README.md`` §4b;
read by ``utils.parse_trace`` at gavel commit ace90a38)::

    job_type  command  num_steps_arg  needs_data_dir  total_steps  arrival_time  scale_factor

Rules (``docs/trace-format.md``):

* ``job_id`` = ``gavel-<n>``, ``n`` the 1-based data row number (blank lines are
  skipped and not numbered; bad rows are numbered, so ids never shift).
* ``submit_time`` = ``arrival_time`` (seconds since the VC trace start) minus
  the earliest one read; ``num_gpus`` = ``scale_factor``.
* ``iterations`` = ``total_steps``, ``duration_s`` unset: the trace gives work in
  steps. ``model``: ``job_type`` without its `` (batch size N)`` suffix, mapped
  by :data:`halyard.traces.models.GAVEL_MODELS`; an unknown job type is a bad
  row. The batch size stays in ``extra`` (``job_type_batch_size``); ``JobSpec.batch_size``
  is 0 (the catalog's reference batch): a stand-in model's time per step
  therefore differs from Gavel's.
* ``command`` must hold as many ``%s`` as Gavel fills in: two when
  ``needs_data_dir`` is 1, one when it is 0.
* ``extra`` keeps all seven fields as written (``job_type``, ``command``,
  ``num_steps_arg``, ``needs_data_dir``, ``total_steps``, ``arrival_time``,
  ``scale_factor``) plus ``job_type_batch_size`` when the job type names one.

The current Gavel reads a 10-field form; it is not read here (no sample).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from halyard.datamodel import ValidationError
from halyard.traces.loading import (
    TraceBuilder,
    check_file,
    frozen,
    guard_unicode,
    nonnegative_float,
    positive_int,
    require,
)
from halyard.traces.models import GAVEL_MODELS
from halyard.traces.schema import TraceLoad, parse_int_text

GAVEL_FORMAT = "gavel"
GAVEL_FIELDS: tuple[str, ...] = (
    "job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor")
GAVEL_JOB_ID_PREFIX = "gavel-"
_JOB_TYPE = re.compile(r"^(?P<name>.+?)(?: \(batch size (?P<batch>[0-9]+)\))?$")
_PLACEHOLDERS = {0: 1, 1: 2}  # needs_data_dir -> number of %s in the command


def looks_like_gavel(first_line: str) -> bool:
    parts = first_line.rstrip("\r\n").split("\t")
    return len(parts) == len(GAVEL_FIELDS) and parts[3] in ("0", "1") and parts[4].isdigit()


def parse_job_type(text: str) -> tuple[str, str | None]:
    """``"ResNet-50 (batch size 32)"`` -> ``("ResNet-50", "32")``; ``"A3C"`` -> ``("A3C", None)``."""
    m = _JOB_TYPE.match(text)
    if m is None:
        raise ValidationError("is empty", field="job_type")
    return m["name"], m["batch"]


def read_gavel(path: str | os.PathLike[str], *, strict: bool = False) -> TraceLoad:
    """Read a 7-field Gavel trace (module docstring for the rules)."""
    p, source = check_file(path)
    return guard_unicode(source, lambda: _read(p, source, strict))


def _read(p: Path, source: str, strict: bool) -> TraceLoad:
    b = TraceBuilder(GAVEL_FORMAT, source, strict=strict)
    number = 0
    # newline="\n": only "\n" ends a line, so line numbers are physical lines.
    with p.open(encoding="utf-8-sig", newline="\n") as f:
        for line, text in enumerate(f, start=1):
            text = text.rstrip("\r\n")
            if not text.strip():
                continue
            number += 1
            try:
                parts = text.split("\t")
                if len(parts) != len(GAVEL_FIELDS):
                    raise ValidationError(f"expected {len(GAVEL_FIELDS)} tab-separated fields, got {len(parts)}")
                job_type, command, steps_arg, data_dir, steps, arrival, scale = parts
                name, batch = parse_job_type(require(job_type, "job_type"))
                mapping = GAVEL_MODELS.get(name)
                if mapping is None:
                    raise ValidationError(f"unknown job type {name!r} (known: {', '.join(GAVEL_MODELS)})",
                                          field="job_type")
                require(steps_arg, "num_steps_arg")
                needs = parse_int_text(data_dir, "needs_data_dir")
                if needs not in _PLACEHOLDERS:
                    raise ValidationError(f"must be 0 or 1, got {data_dir!r}", field="needs_data_dir")
                if command.count("%s") != _PLACEHOLDERS[needs]:
                    raise ValidationError(f"must contain {_PLACEHOLDERS[needs]} '%s' placeholder(s) when "
                                          f"needs_data_dir is {needs}, found {command.count('%s')}",
                                          field="command")
                extra = dict(zip(GAVEL_FIELDS, parts, strict=True))
                if batch is not None:
                    extra["job_type_batch_size"] = batch
                fields = {
                    "num_gpus": positive_int(scale, "scale_factor"),
                    "iterations": positive_int(steps, "total_steps"),
                    "extra": frozen({k: v for k, v in extra.items() if v != ""}),
                }
                time = nonnegative_float(arrival, "arrival_time")
            except ValidationError as err:
                b.error(err, line)
                continue
            b.add(line=line, time=time, job_id=f"{GAVEL_JOB_ID_PREFIX}{number}", fields=fields,
                  model=mapping.model)
    return b.finish()
