"""Fit the three latencies of Dally's network to Table 1 and print the side-by-side table.

    .venv/bin/python benchmarks/fit_dally_table1.py

Inputs: emulator/data/dally_table1.toml (sourced). The fit is a grid search
(halyard.emulator.calibration.FIT_GRID) of least squares on log10(1 + overhead %);
the values it prints are the ones recorded in that file. Also prints what the
default PerformanceModel gives with real A100 compute on the same placements.
"""

from __future__ import annotations

import sys

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, parse_cluster
from halyard.emulator import PerformanceModel
from halyard.emulator.calibration import dally_fit_loss, dally_overheads_pct, fit_dally_latencies, load_dally_table1

CLUSTER = """
name = "dally"
[[racks]]
name = "r{i}"
count = 2
uplink_gbit_s = 96
[[racks.nodes]]
name = "{rack}-n{i}"
count = 4
gpu_type = "A100"
gpus = 8
cpus = 24
memory_gb = 500
fabric = "nvswitch"
fabric_gbyte_s = 300
nic_gbit_s = 200
"""
DALLY_BATCH = {"vgg11": 32, "bert-large": 32, "alexnet": 64, "mobilenetv3": 64, "resnet18": 64, "resnet50": 64}


def alloc(*parts: tuple[str, int]) -> Allocation:
    return Allocation(tuple(NodeAllocation(node, tuple(range(k)), 0, 0) for node, k in parts))


def main() -> int:
    table = load_dally_table1()
    best, loss = fit_dally_latencies(table)
    print(f"fitted latencies: node {best.node_latency_s:.3g} s, rack {best.rack_latency_s:.3g} s, "
          f"network {best.network_latency_s:.3g} s (loss {loss:.3f}; recorded values: loss "
          f"{dally_fit_loss(table):.3f})")
    pm = PerformanceModel()
    cluster = parse_cluster(CLUSTER)
    placements = (alloc(("r0-n0", 8)), alloc(("r0-n0", 4), ("r0-n1", 4)), alloc(("r0-n0", 4), ("r1-n0", 4)))
    print("| model | Dally Table 1 | model, Dally's inputs | PerformanceModel A100 exposed | A100 all-reduce |")
    print("| --- | --- | --- | --- | --- |")
    for w in table.workloads.values():
        ours = dally_overheads_pct(w, table.network)
        spec = JobSpec(job_id="j", submit_time=0.0, model=w.name, num_gpus=8, iterations=1,
                       batch_size=DALLY_BATCH[w.name])
        times = [pm.iteration_time(spec, a, cluster) for a in placements]
        print(f"| {w.name} | {' / '.join(f'{v:g}' for v in w.table_pct)} | "
              f"{' / '.join(f'{v:.0f}' for v in ours)} | "
              f"{' / '.join(f'{100 * t.exposed_s / t.compute_s:.1f}' for t in times)} | "
              f"{' / '.join(f'{100 * t.communication_s / t.compute_s:.1f}' for t in times)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
