"""Traces: the canonical job-trace schema, its readers and writers, and generators.

Public surface:

* :func:`read_trace` reads a trace file of any accepted format (canonical CSV,
  canonical JSONL, the processed Philly file) into a :class:`TraceLoad`
  (jobs sorted by submit time, plus the rows skipped as invalid, each error
  naming file, line and field); :func:`write_trace` writes canonical CSV/JSONL.
* :data:`CANONICAL_COLUMNS` are the schema's columns (``docs/trace-format.md``).
* :func:`read_philly` reads the Pollux artifact's processed Philly file with a
  seeded, documented model assignment.
* :func:`generate_synergy_trace` builds Synergy's production-derived synthetic
  trace; the Synergy Table 4 model names are :data:`SYNERGY_IMAGE_MODELS`,
  :data:`SYNERGY_LANGUAGE_MODELS` and :data:`SYNERGY_SPEECH_MODELS`.

This package imports nothing of Halyard's but :mod:`halyard.datamodel`.
"""

from halyard.traces.canonical import ACCEPTED_FORMATS, read_trace, write_trace
from halyard.traces.generator import (
    SYNERGY_DEFAULT_SPLIT,
    SYNERGY_IMAGE_MODELS,
    SYNERGY_LANGUAGE_MODELS,
    SYNERGY_SPEECH_MODELS,
    SYNERGY_TASK_MODELS,
    generate_synergy_trace,
)
from halyard.traces.philly import read_philly
from halyard.traces.schema import CANONICAL_COLUMNS, TraceLoad

__all__ = [
    "ACCEPTED_FORMATS",
    "CANONICAL_COLUMNS",
    "SYNERGY_DEFAULT_SPLIT",
    "SYNERGY_IMAGE_MODELS",
    "SYNERGY_LANGUAGE_MODELS",
    "SYNERGY_SPEECH_MODELS",
    "SYNERGY_TASK_MODELS",
    "TraceLoad",
    "generate_synergy_trace",
    "read_philly",
    "read_trace",
    "write_trace",
]
