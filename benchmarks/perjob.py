"""The per-job join that the side-by-side harnesses share (``*_public_perjob.py``).

A run is ``{"jobs": {job id: {"submit": s, "end": s or None}}, "cpu_s": s}``, whichever simulator made it,
so the public simulator's run and Halyard's are summarised by the same code.
"""

from __future__ import annotations

import math


def jcts(run: dict) -> dict[str, float]:
    """Each finished job's completion time (end - submit), by job id."""
    return {k: v["end"] - v["submit"] for k, v in run["jobs"].items() if v["end"] is not None}


def p99(xs: list[float]) -> float:
    """The 99th percentile by the nearest-rank rule."""
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def stats(run: dict) -> dict:
    """Jobs finished, mean and p99 JCT, makespan (first submission to last end) and CPU seconds."""
    j = jcts(run)
    ends = [v["end"] for v in run["jobs"].values() if v["end"] is not None]
    return {"jobs": len(j), "mean_jct_s": sum(j.values()) / len(j), "p99_jct_s": p99(list(j.values())),
            "makespan_s": max(ends) - min(v["submit"] for v in run["jobs"].values()), "cpu_s": run["cpu_s"]}
