"""Exposed communication per job, queueing-delay and JCT tails, and Dally's built-in clusters."""

from __future__ import annotations

import numpy as np
import pytest
from factories import job

from halyard.datamodel import JobState, Tier, load_cluster
from halyard.policies import make_policy
from halyard.scheduling import JobRecord, Simulator, job_metrics, summarize
from halyard.scheduling.metrics import tail_mean


def test_exposed_communication_accrues_per_segment():
    """iterations x exposed seconds per iteration, over each run segment; a lost partial
    iteration is run (and counted) again; a restore adds nothing."""
    spec = job(2, iterations=100, job_id="x")
    r = JobRecord(spec, 0, 100, 1.0, 0.0)
    r.set_rate(0.0, 2.0, exposed_s=0.5)         # 2 s per iteration, 0.5 s exposed
    assert r.exposed_comm_s(10.0) == pytest.approx(2.5)   # 5 iterations
    r.end_run(11.0, checkpoint=True)             # 5.5 iterations ran; the checkpoint keeps 5
    assert r.exposed_comm_s(50.0) == pytest.approx(2.75)
    r.set_rate(20.0, 1.0, restore_s=4.0, exposed_s=0.1)
    assert r.exposed_comm_s(24.0) == pytest.approx(2.75)  # restoring: no iterations
    assert r.exposed_comm_s(34.0) == pytest.approx(2.75 + 1.0)
    r.finish(r.finish_time(), JobState.COMPLETED)  # 95 iterations in the second segment
    assert r.exposed_comm_s(1e9) == pytest.approx(2.75 + 9.5)


def test_simulated_job_charges_the_models_exposed_time(small_cluster, perf):
    """An 8-GPU job spans two machines of a rack; its exposed communication is the performance
    model's exposed seconds per iteration times its iterations, its share that over run time."""
    sim = Simulator(small_cluster, make_policy("fifo"), perf)
    sim.run([job(8, iterations=1000, model="vgg11", job_id="big")])
    rec = sim.core.records["big"]
    assert rec.allocation is not None  # a finished job keeps its last allocation
    timing = perf.iteration_time(rec.spec, rec.allocation, small_cluster)
    assert timing.tier is Tier.RACK and timing.exposed_s > 0
    (row,) = job_metrics(sim.core)
    assert row["exposed_comm_s"] == pytest.approx(1000 * timing.exposed_s)
    assert row["comm_share"] == pytest.approx(timing.exposed_s / timing.total_s)
    s = summarize(sim.core, policy="fifo", trace_jobs=1, rejected=0, wall_s=1.0)
    assert s["exposed_comm_s"] == pytest.approx(1000 * timing.exposed_s)
    assert s["comm_share"] == pytest.approx(row["comm_share"])
    assert s["avg_comm_share"] == pytest.approx(row["comm_share"])


def test_one_gpu_job_exposes_nothing(small_cluster, perf):
    sim = Simulator(small_cluster, make_policy("fifo"), perf)
    sim.run([job(1, iterations=50, job_id="one")])
    assert job_metrics(sim.core)[0]["exposed_comm_s"] == 0.0


def test_tail_mean_is_the_mean_beyond_the_percentile():
    """Dally's '>P95': the mean of the values at or above the 95th percentile."""
    values = np.arange(1.0, 101.0)
    assert tail_mean(values, 95) == pytest.approx(98.0)   # P95 = 95.05 -> 96..100
    assert tail_mean(values, 99) == pytest.approx(100.0)
    assert tail_mean(np.array([]), 95) == 0.0


def test_summary_keeps_old_keys_and_adds_tails(small_cluster, perf):
    jobs = [job(4, submit=0.0, iterations=400 + 100 * i, job_id=f"q{i}") for i in range(6)]
    sim = Simulator(small_cluster, make_policy("fifo"), perf)
    sim.run(jobs)
    s = summarize(sim.core, policy="fifo", trace_jobs=6, rejected=0, wall_s=1.0)
    old = {"policy", "cluster", "jobs", "rejected", "completed", "avg_jct_s", "p50_jct_s", "p95_jct_s",
           "p99_jct_s", "makespan_s", "avg_queue_s", "gpu_utilization", "preemptions", "passes",
           "avg_pass_ms", "events", "wall_s", "jobs_per_wall_s"}
    assert old <= set(s)
    queue = np.array([r.queued_s for r in sim.core.records.values()])
    assert s["p95_queue_s"] == pytest.approx(np.percentile(queue, 95))
    assert s["tail95_queue_s"] == pytest.approx(queue[queue >= np.percentile(queue, 95)].mean())
    assert s["tail99_jct_s"] >= s["tail95_jct_s"] >= s["avg_jct_s"]
    # The pass latency distribution (issue 19): one sample per pass, ordered, the mean inside it.
    times = sim.core.pass_seconds
    assert times.exact and times.count == len(times.sample()) == s["passes"] > 0
    assert 0 < s["p50_pass_ms"] <= s["p99_pass_ms"] <= s["max_pass_ms"] == pytest.approx(
        1e3 * max(times.sample()))
    assert s["p50_pass_ms"] == pytest.approx(np.percentile(1e3 * times.sample(), 50))
    assert s["avg_pass_ms"] <= s["max_pass_ms"]


@pytest.mark.parametrize("racks", [2, 4, 8, 16])
def test_dally_clusters(racks):
    """Dally §5.1.2: racks x 8 machines x 8 GPUs."""
    c = load_cluster(f"dally-{racks}rack")
    assert (len(c.racks), len(c.nodes), c.total_gpus) == (racks, 8 * racks, 64 * racks)
    assert {n.gpus for n in c.nodes} == {8} and {len(r.node_indices) for r in c.racks} == {8}


def test_dally_cluster_tiers_cost_more_further_out(perf):
    """Machine < rack < network for a communication-heavy model on the Dally cluster."""
    from halyard.datamodel import Allocation, JobSpec, NodeAllocation

    c = load_cluster("dally-2rack")
    spec = JobSpec(job_id="t", submit_time=0.0, model="alexnet", num_gpus=8, iterations=1, batch_size=64)

    def cost(*parts):
        alloc = Allocation(tuple(NodeAllocation(n, tuple(range(k)), 0, 0) for n, k in parts))
        return perf.iteration_time(spec, alloc, c).exposed_s

    machine, rack, network = cost(("r0-m0", 8)), cost(("r0-m0", 4), ("r0-m1", 4)), cost(("r0-m0", 4), ("r1-m0", 4))
    assert machine < rack < network
