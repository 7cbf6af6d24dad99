"""Traces: the canonical job-trace schema, its readers and writers, and generators.

Public surface:

* :func:`read_trace` reads a trace file of any format in :data:`FORMATS`
  (canonical CSV/JSONL, processed and raw Philly, ITP raw/annotated, Gavel,
  Pollux, Alibaba PAI v2020 and v2023, Helios), detected by
  :func:`detect_format` or named, into a :class:`TraceLoad` (jobs sorted by
  submit time, the rows skipped as invalid, each error naming file, line and
  field, and the valid rows dropped as non-jobs, by reason);
  :func:`write_trace` writes canonical CSV/JSONL. Each format also has its own
  ``read_<format>`` function; :func:`trace_stats` summarises a loaded trace.
* :data:`CANONICAL_COLUMNS` are the schema's columns (``docs/trace-format.md``).
* :func:`read_philly` reads the Pollux artifact's processed Philly file with a
  seeded, documented model assignment.
* :func:`adapt_for_crius` draws Crius' model and elastic GPU amount for any trace (§8.1).
* :func:`generate_synergy_trace` builds Synergy's production-derived synthetic
  trace; the Synergy Table 4 model names are :data:`SYNERGY_IMAGE_MODELS`,
  :data:`SYNERGY_LANGUAGE_MODELS` and :data:`SYNERGY_SPEECH_MODELS`.

This package imports nothing of Halyard's but :mod:`halyard.datamodel`.
"""

from halyard.traces.alibaba import read_alibaba
from halyard.traces.canonical import read_canonical_csv, read_canonical_jsonl, write_trace
from halyard.traces.crius import CRIUS_FAMILIES, CRIUS_GPU_CHOICES, CRIUS_MODELS, adapt_for_crius
from halyard.traces.easyscale import (
    ARTIFACT_DEMAND,
    ARTIFACT_JOBS,
    ARTIFACT_RATE_PER_HOUR,
    EASYSCALE_MODELS,
    generate_easyscale_trace,
)
from halyard.traces.gavel import read_gavel
from halyard.traces.generator import (
    SYNERGY_DEFAULT_SPLIT,
    SYNERGY_IMAGE_MODELS,
    SYNERGY_LANGUAGE_MODELS,
    SYNERGY_SPEECH_MODELS,
    SYNERGY_TASK_MODELS,
    generate_synergy_trace,
)
from halyard.traces.helios import read_helios
from halyard.traces.itp import read_itp
from halyard.traces.pai import read_pai
from halyard.traces.philly import read_philly
from halyard.traces.philly_raw import read_philly_raw
from halyard.traces.pollux import read_pollux
from halyard.traces.registry import (
    ACCEPTED_FORMATS,
    AUTO,
    FORMAT_NAMES,
    FORMATS,
    TraceFormat,
    detect_format,
    read_trace,
    resolve_format,
)
from halyard.traces.schema import CANONICAL_COLUMNS, TraceLoad
from halyard.traces.stats import trace_stats

__all__ = [
    "ACCEPTED_FORMATS",
    "ARTIFACT_DEMAND",
    "ARTIFACT_JOBS",
    "ARTIFACT_RATE_PER_HOUR",
    "AUTO",
    "CANONICAL_COLUMNS",
    "CRIUS_FAMILIES",
    "CRIUS_GPU_CHOICES",
    "CRIUS_MODELS",
    "EASYSCALE_MODELS",
    "FORMATS",
    "FORMAT_NAMES",
    "SYNERGY_DEFAULT_SPLIT",
    "SYNERGY_IMAGE_MODELS",
    "SYNERGY_LANGUAGE_MODELS",
    "SYNERGY_SPEECH_MODELS",
    "SYNERGY_TASK_MODELS",
    "TraceFormat",
    "TraceLoad",
    "adapt_for_crius",
    "detect_format",
    "generate_easyscale_trace",
    "generate_synergy_trace",
    "read_alibaba",
    "read_canonical_csv",
    "read_canonical_jsonl",
    "read_gavel",
    "read_helios",
    "read_itp",
    "read_pai",
    "read_philly",
    "read_philly_raw",
    "read_pollux",
    "read_trace",
    "resolve_format",
    "trace_stats",
    "write_trace",
]
