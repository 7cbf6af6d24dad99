"""Experiments: simulation runs as data, sweeps of them in parallel, and the HTML comparison report.

:class:`RunSpec` is one ``halyard simulate``; :func:`execute` runs it here,
:func:`run_many` runs many in worker processes (or on Ray) with one progress
bar; :func:`write_report` (``halyard.experiments.report``) turns the results into
one self-contained HTML page. ``halyard compare`` and the reproduction scripts in
``benchmarks/`` are callers of these.
"""

from halyard.experiments.runs import (
    DEFAULT_ROUND_S,
    RunResult,
    RunSpec,
    execute,
    run_and_save,
    run_many,
    simulate_jobs,
    trace_jobs,
)

__all__ = ["DEFAULT_ROUND_S", "RunResult", "RunSpec", "execute", "run_and_save", "run_many", "simulate_jobs",
           "trace_jobs"]
