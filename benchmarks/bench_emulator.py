"""Performance-model evaluations per second, as ratios to a baseline measured in the same run.

    .venv/bin/python benchmarks/bench_emulator.py [--calls 200000]

The baseline is `iteration_time` for one GPU on the Philly cluster with a warm
cache (the simulator's common case). Every other row prints its calls per second
and its cost relative to the baseline, so figures from different machines
compare by ratio, not by absolute time. Not part of the tests.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, load_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.contention import data_parallel_profile, mean_field_iteration_times, shared_link_iteration_times
from halyard.emulator.fabric import Fabric


def alloc(*parts: tuple[str, int]) -> Allocation:
    return Allocation(tuple(NodeAllocation(node, tuple(range(k)), 3 * k, 62_500 * k) for node, k in parts))


def rate(fn: Callable[[], object], calls: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - t0)
    return calls / best


_FABRICS: dict[bool, Fabric] = {}


def fabric_churn(pm: PerformanceModel, cluster, spec: JobSpec, *, cached: bool) -> None:
    """What the simulator pays when a co-runner comes and goes: place, settle, remove, settle.
    One GPU per node: the all-reduce is NIC-bound, so two vgg11 jobs contend on Philly's NICs."""
    fabric = _FABRICS.get(cached) if cached else None
    if fabric is None:
        fabric = Fabric(pm, cluster)
        fabric.place("a", spec, alloc(("r0-n0", 1), ("r0-n1", 1)), 0.0)
        fabric.settle()
        if cached:
            _FABRICS[cached] = fabric
    fabric.place("b", spec, Allocation((NodeAllocation("r0-n0", (1,), 3, 62_500),
                                        NodeAllocation("r0-n1", (1,), 3, 62_500))), 0.0)
    fabric.settle()
    fabric.remove("b")
    fabric.settle()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args()
    cluster = load_cluster("philly")
    pm = PerformanceModel()
    stalls = PerformanceModel(data_stalls=True)
    spec = JobSpec(job_id="j", submit_time=0.0, model="resnet50", num_gpus=8, iterations=1)
    one = alloc(("r0-n0", 1))
    node = alloc(("r0-n0", 8))
    rack = alloc(*[(f"r0-n{i}", 2) for i in range(4)])
    spine = alloc(*[(f"r{r}-n{i}", 2) for r in range(2) for i in range(2)])
    n = args.calls
    rows: list[tuple[str, float]] = [
        ("iteration_time, 1 GPU (baseline)", rate(lambda: pm.iteration_time(spec, one, cluster), n)),
        ("iteration_time, 8 GPUs on a node", rate(lambda: pm.iteration_time(spec, node, cluster), n)),
        ("iteration_time, 4 nodes of a rack", rate(lambda: pm.iteration_time(spec, rack, cluster), n)),
        ("iteration_time, 4 nodes over 2 racks", rate(lambda: pm.iteration_time(spec, spine, cluster), n)),
        ("iteration_time with data stalls, 4 nodes", rate(lambda: stalls.iteration_time(spec, rack, cluster), n)),
        ("consolidated_iteration_time", rate(lambda: pm.consolidated_iteration_time(spec, cluster), n)),
        ("throughput_factor", rate(lambda: pm.throughput_factor("alexnet", 6, 125), n // 4)),
        ("iteration_time, cold cache (new model each call)",
         rate(lambda: PerformanceModel(pm.catalog).iteration_time(spec, rack, cluster), max(1, n // 200))),
    ]
    a = data_parallel_profile(1.0, 0.5, 10.0)
    rows.append(("shared_link_iteration_times, 2 jobs, fair",
                 rate(lambda: shared_link_iteration_times([a, a], 10.0), max(1, n // 2000))))
    rows.append(("shared_link_iteration_times, 2 jobs, mltcp",
                 rate(lambda: shared_link_iteration_times([a, a], 10.0, sharing="mltcp", time_shifts_s=[0, .01]),
                      max(1, n // 20000))))
    vgg = JobSpec(job_id="v", submit_time=0.0, model="vgg11", num_gpus=2, iterations=1)
    many = [data_parallel_profile(1.0 + 0.1 * i, 0.4, 10.0) for i in range(12)]
    rows.append(("mean_field_iteration_times, 12 jobs",
                 rate(lambda: mean_field_iteration_times(many, 20.0), max(1, n // 200))))
    rows.append(("Fabric: a job joins and leaves a shared NIC (cold)",
                 rate(lambda: fabric_churn(pm, cluster, vgg, cached=False), max(1, n // 2000))))
    rows.append(("Fabric: a job joins and leaves a shared NIC (cached)",
                 rate(lambda: fabric_churn(pm, cluster, vgg, cached=True), max(1, n // 20))))
    base = rows[0][1]
    print(f"{'evaluation':52} {'calls/s':>12} {'cost vs baseline':>17}")
    for name, r in rows:
        print(f"{name:52} {r:12,.0f} {base / r:16.1f}x")


if __name__ == "__main__":
    main()
