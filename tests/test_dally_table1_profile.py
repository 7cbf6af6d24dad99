"""The `dally-table1` catalog profile: Dally's Table 1 overheads as the performance model's own.

Dally §4.2.1: ArtISt-sim applies ASTRA-sim's exposed-communication percentage of the job's
placement to the trace's compute. Table 1 gives it for 8 GPUs on one machine, two machines
of a rack (4 + 4) and two racks (4 + 4); the profile must give exactly those, through the
same `iteration_time` the simulator calls, and reach `halyard simulate` by name.
"""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, Tier, ValidationError, load_cluster, parse_cluster
from halyard.emulator import PerformanceModel, load_model_catalog
from halyard.emulator.catalog import extend_catalog, load_catalog
from halyard.policies import make_policy
from halyard.scheduling import Simulator
from halyard.testing.cluster import small_cluster_toml
from halyard.traces import write_trace

# Dally Table 1, "Communication overhead as a % of compute time": machine / rack / network.
TABLE1_PCT = {"vgg11": (1, 6, 7), "alexnet": (2, 13, 100), "mobilenetv3": (42, 940, 19592),
              "resnet18": (7, 116, 2749), "resnet50": (12, 12, 38), "bert-large": (8, 23, 715)}


def alloc(*parts: tuple[str, int]) -> Allocation:
    return Allocation(tuple(NodeAllocation(node, tuple(range(k)), 0, 0) for node, k in parts))


@pytest.fixture(scope="module")
def table1_model() -> PerformanceModel:
    return PerformanceModel(load_model_catalog("dally-table1"), contention="off")


@pytest.mark.parametrize("model", sorted(TABLE1_PCT))
def test_the_profile_gives_table1_on_its_placements(table1_model, model):
    cluster = load_cluster("dally-2rack")  # racks r0, r1 of 8 machines x 8 GPUs
    spec = JobSpec(job_id="j", submit_time=0.0, model=model, num_gpus=8, iterations=1, batch_size=64)
    placements = (alloc(("r0-m0", 8)), alloc(("r0-m0", 4), ("r0-m1", 4)), alloc(("r0-m0", 4), ("r1-m0", 4)))
    got = [table1_model.iteration_time(spec, a, cluster) for a in placements]
    for timing, pct in zip(got, TABLE1_PCT[model], strict=True):
        assert 100.0 * timing.exposed_s / timing.compute_s == pytest.approx(pct)
        assert timing.total_s == pytest.approx(timing.compute_s * (1 + pct / 100.0))
    one = table1_model.iteration_time(spec, alloc(("r0-m0", 1)), cluster)
    assert one.exposed_s == 0.0 and one.compute_s == got[0].compute_s  # one GPU communicates nothing
    # the compute is the built-in catalog's: only the communication changes
    assert got[0].compute_s == PerformanceModel(contention="off").iteration_time(spec, placements[0], cluster).compute_s


def test_models_outside_the_profile_keep_the_collective_model(table1_model):
    cluster = load_cluster("dally-2rack")
    spec = JobSpec(job_id="j", submit_time=0.0, model="gnmt", num_gpus=8, iterations=1)
    a = alloc(("r0-m0", 4), ("r1-m0", 4))
    assert table1_model.iteration_time(spec, a, cluster) == PerformanceModel(contention="off").iteration_time(
        spec, a, cluster)


def test_bad_tier_overhead_tables_are_named():
    base = load_catalog()
    with pytest.raises(ValidationError, match=r"tier_overhead\.nosuch.*no model 'nosuch'"):
        extend_catalog(base, 'schema_version = 2\n[tier_overhead.nosuch]\nmachine = { value = 0.1, source = "x" }\n')
    with pytest.raises(ValidationError, match=r"tier_overhead\.vgg11\.spine.*unknown key"):
        extend_catalog(base, 'schema_version = 2\n[tier_overhead.vgg11]\nspine = { value = 0.1, source = "x" }\n')
    with pytest.raises(ValidationError, match=r"tier_overhead\.vgg11\.rack.*is required"):
        extend_catalog(base, 'schema_version = 2\n[tier_overhead.vgg11]\nmachine = { value = 0.1, source = "x" }\n'
                             'network = { value = 0.1, source = "x" }\n')


def test_simulate_takes_the_profile_by_name(tmp_path):
    """A MobileNetV3 job on 16 GPUs (two machines of a rack) runs 10.4x its compute with the profile
    (Table 1: 940% in a rack); without it, the collective model charges a few per cent."""
    trace = tmp_path / "t.csv"
    write_trace([JobSpec(job_id="m", submit_time=0.0, model="mobilenetv3", num_gpus=16, iterations=1000,
                         batch_size=64)], trace)

    def run_s(*extra: str) -> float:
        out = tmp_path / f"out{len(extra)}"
        proc = subprocess.run([sys.executable, "-m", "halyard.cli", "simulate", "--trace", str(trace), "--cluster",
                               "dally-2rack", "--no-progress", "--contention", "off", "--out-dir", str(out),
                               "--table-format", "csv", *extra], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        with (out / "jobs.csv").open() as f:
            return float(next(csv.DictReader(f))["run_s"])

    plain, table1 = run_s(), run_s("--catalog", "dally-table1")
    compute = 1000 * PerformanceModel().ideal_iteration_time(
        JobSpec(job_id="m", submit_time=0.0, model="mobilenetv3", num_gpus=16, iterations=1, batch_size=64), "A100")
    assert table1 == pytest.approx(compute * 10.4, rel=1e-3)
    assert plain < 1.2 * compute


def test_table1_jobs_put_no_load_on_the_links():
    """Dally §4.2.1: a Table 1 model's exposed time already is its communication, so with link
    contention on, two such jobs sharing a NIC run exactly as with contention off (the fabric must
    not slow them a second time), while a model outside the profile still loads the links."""
    # three 4-GPU machines of one rack with 1 Gbit/s NICs: two 6-GPU BERT-large jobs share r0-n1's
    # NIC under fifo's first fit, and their all-reduces (1.3 GB each) ask for more than it carries
    toml = small_cluster_toml(3, gpus_per_node=4).replace("nic_gbit_s = 200", "nic_gbit_s = 1")
    cluster = parse_cluster(toml)
    jobs = [JobSpec(job_id=j, submit_time=0.0, model="bert-large", num_gpus=6, iterations=200, batch_size=32)
            for j in ("a", "b")]
    catalog = load_model_catalog("dally-table1")
    ends = {}
    for contention in ("off", "fair"):
        sim = Simulator(cluster, make_policy("fifo"), PerformanceModel(catalog, contention=contention))
        sim.run(jobs)
        ends[contention] = {j.job_id: sim.core.records[j.job_id].end_time for j in jobs}
        held = [{p.node for p in sim.core.records[j.job_id].allocation.nodes} for j in jobs]
        assert held[0] & held[1] == {"r0-n1"}  # the shared NIC
    assert ends["fair"] == ends["off"]
    pm = PerformanceModel(catalog, contention="fair")
    b = alloc(("r0-n1", 2), ("r0-n2", 4))
    assert pm.job_timing(jobs[1], b, cluster).iteration.tier is Tier.RACK
    assert pm.job_timing(jobs[1], b, cluster).links == ()
    outside = JobSpec(job_id="g", submit_time=0.0, model="gnmt", num_gpus=6, iterations=1)
    assert pm.job_timing(outside, b, cluster).links  # the collective model still loads the NICs
