"""Trace loading speed and peak memory, against a plain ``csv.reader`` pass over the same file.

For each file: the baseline reads every row with ``csv.reader`` and does
nothing else; then ``halyard.traces.read_trace`` loads it into ``JobSpec``s. Time
is the best of ``--repeat`` runs without tracing; peak memory is measured in a
separate run under ``tracemalloc`` (Python allocations only, so it is the
memory the loader itself holds, not the interpreter). Ratios are to the
baseline of the same file in the same invocation, so they compare across
machines; the absolute figures do not. The streaming pass keeps nothing, so
its peak is a few kilobytes; as a memory reference the table also shows
``csv rows held`` (every record kept as a list of strings) and the loader's
peak bytes per job.

    .venv/bin/python benchmarks/bench_traces.py [FILE ...] [--repeat 3]

Default file: the full processed Philly file (82,247 jobs) in the workspace's
shared/traces/, plus the ITP raw and Alibaba v2023 files there when present.
"""

from __future__ import annotations

import argparse
import csv
import gc
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from halyard.traces import detect_format, read_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
DEFAULT_FILES = (
    SHARED / "philly_pollux_jobs_full.csv",
    SHARED / "elasticflow_itp_raw_cluster01.csv",
    SHARED / "alibaba_v2023_openb_pod_list_default.csv",
)
MIB = 1024 * 1024


def csv_pass(path: Path) -> int:
    """The baseline: read every record with csv.reader, keep nothing; returns the non-blank records."""
    rows = 0
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            rows += bool(row)
    return rows


def csv_rows_held(path: Path) -> list[list[str]]:
    """A memory reference: every record held as a list of strings (what a non-streaming reader keeps)."""
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_memory(fn: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del result
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (best is kept)")
    args = ap.parse_args()
    files = args.files or [p for p in DEFAULT_FILES if p.exists()]
    if not files:
        raise SystemExit(f"no trace files given and none found in {SHARED}")
    print(f"{'file':<40} {'format':<14} {'rows':>6} {'jobs':>6} {'what':<15} {'s':>6} {'rows/s':>10} "
          f"{'x csv':>6} {'peak MiB':>9} {'B/row':>6}")
    for path in files:
        fmt = detect_format(path).name
        rows = csv_pass(path) - (fmt != "gavel")  # data rows: less the header row
        jobs = len(read_trace(path).jobs)
        base_s = best_time(lambda p=path: csv_pass(p), args.repeat)
        measured = [
            ("csv.reader pass", base_s, peak_memory(lambda p=path: csv_pass(p))),
            ("csv rows held", best_time(lambda p=path: csv_rows_held(p), args.repeat),
             peak_memory(lambda p=path: csv_rows_held(p))),
            ("read_trace", best_time(lambda p=path: read_trace(p), args.repeat),
             peak_memory(lambda p=path: read_trace(p))),
        ]
        for what, secs, mem in measured:
            print(f"{path.name[:40]:<40} {fmt:<14} {rows:>6} {jobs:>6} {what:<15} {secs:>6.3f} "
                  f"{rows / secs:>10,.0f} {secs / base_s:>6.1f} {mem / MIB:>9.2f} {mem / rows:>6.0f}")


if __name__ == "__main__":
    main()
