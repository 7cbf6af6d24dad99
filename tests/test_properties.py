"""Invariants under random traces (hypothesis).

* never over-allocate: on every node, free + held = capacity for GPUs, CPU
  cores and memory, and no GPU index is held by two jobs;
* a job holds at most one allocation, and only while RUNNING;
* under FIFO every job that fits the cluster completes.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_fakes import Wrapping

from halyard.datamodel import JobSpec, JobState
from halyard.policies import ClusterView, PassState, Plan, Policy, make_policy
from halyard.scheduling import Simulator

MODELS = ("resnet50", "resnet18", "bert-large", "gnmt", "alexnet")


@st.composite
def traces(draw, max_gpus: int = 16):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.floats(0, 2000, allow_nan=False), min_size=n, max_size=n))
    jobs, t = [], 0.0
    for i, gap in enumerate(gaps):
        t += gap
        jobs.append(JobSpec(job_id=f"p{i}", submit_time=t, model=draw(st.sampled_from(MODELS)),
                            num_gpus=draw(st.sampled_from([1, 1, 2, 3, 4, 8, max_gpus])),
                            iterations=draw(st.integers(1, 3000))))
    return jobs


class Checked(Wrapping):
    """Wraps a policy and checks the core's state each time it is asked for a plan."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self.checks = 0

    def schedule(self, view: ClusterView, state: PassState) -> Plan:
        check_ledger(view)
        self.checks += 1
        return self.inner.schedule(view, state)


def check_ledger(view: ClusterView) -> None:
    held_gpus: dict[str, set[int]] = {n.name: set() for n in view.cluster.nodes}
    held_cpu = dict.fromkeys(held_gpus, 0)
    held_mem = dict.fromkeys(held_gpus, 0)
    for job in view.running.values():
        assert job.state is JobState.RUNNING and job.allocation is not None
        for part in job.allocation.nodes:
            assert not held_gpus[part.node] & set(part.gpus), f"GPU held twice on {part.node}"
            held_gpus[part.node] |= set(part.gpus)
            held_cpu[part.node] += part.cpus
            held_mem[part.node] += part.memory_mb
    for job in view.pending:
        assert job.state is JobState.PENDING and job.allocation is None
    for node in view.cluster.nodes:
        i = node.index
        assert view.free.gpus[i] + len(held_gpus[node.name]) == node.gpus
        assert bin(view.free.gpu_mask[i]).count("1") == view.free.gpus[i]
        assert not any(view.free.gpu_mask[i] >> g & 1 for g in held_gpus[node.name])
        assert view.free.cpus[i] + held_cpu[node.name] == node.cpus
        assert view.free.memory_mb[i] + held_mem[node.name] == node.memory_mb


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=traces(), policy=st.sampled_from(["fifo", "srtf", "las", "tiresias", "gandiva", "dally", "dally-manual"]))
def test_never_over_allocates(small_cluster, perf, jobs, policy):
    checked = Checked(make_policy(policy))
    sim = Simulator(small_cluster, checked, perf, round_s=300.0)
    sim.run(jobs)
    check_ledger(sim.core.view(float("inf")))
    assert checked.checks == sim.core.passes > 0
    assert all(r.state is JobState.COMPLETED for r in sim.core.records.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=traces())
def test_every_job_completes_under_fifo(small_cluster, perf, jobs):
    sim = Simulator(small_cluster, make_policy("fifo"), perf)
    run = sim.run(jobs)
    assert run.rejected == []
    recs = sim.core.records.values()
    assert len(recs) == len(jobs)
    assert all(r.state is JobState.COMPLETED and r.end_time >= r.spec.submit_time for r in recs)
    assert sim.core.free.total_gpus == small_cluster.total_gpus
    assert sum(r.preemptions for r in recs) == 0  # FIFO never preempts
