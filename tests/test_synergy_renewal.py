"""TUNE's round re-pack without the jobs whose turn is known (issue 19): a running job wholly on
*closed* servers -- no free GPU, and the demand vectors of the runnable jobs there fit what they leave
when released -- renews its lease at its demand in place whatever the packing order (``Tune._renewing``).
Skipping their turns must change no plan: a loaded run with and without the shortcut logs the same
events, and the shortcut is taken for most running jobs.
"""

from __future__ import annotations

from factories import job
from policy_fakes import FakeJob, view_of

from halyard.datamodel import Allocation, JobState, NodeAllocation, load_cluster
from halyard.policies import StagedPolicy
from halyard.policies.ordering import ORDERINGS
from halyard.policies.synergy import Tune
from halyard.policies.synergy_packing import KeptShapes, Packer
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace

GB = 1000


def _on(*parts: tuple[str, tuple[int, ...], int, int]) -> Allocation:
    return Allocation(tuple(NodeAllocation(node, gpus, cpus, memory_mb) for node, gpus, cpus, memory_mb in parts))


def test_closed_servers_renew_and_open_ones_spread_to_the_jobs_that_span_them(small_cluster):
    """Servers of 4 GPUs, 12 CPUs. r0-n0: a at its demand and b above it (memory), no GPU free, demands
    8 + 4 CPUs fit: closed, both renew (b set to its demand). r0-n1: c wants 16 CPUs of 12: open. r1-n0: d and e want
    10 + 4 of 12 CPUs: open; e spans r1-n1 too, which opens it, so f there does not renew although its
    own server would be closed."""
    demand = {"a": (4, 50 * GB), "b": (2, 40 * GB), "c": (4, 50 * GB), "d": (5, 50 * GB), "e": (2, 50 * GB),
              "f": (2, 50 * GB)}
    allocations = {
        "a": _on(("r0-n0", (0, 1), 8, 100 * GB)),
        "b": _on(("r0-n0", (2, 3), 4, 100 * GB)),
        "c": _on(("r0-n1", (0, 1, 2, 3), 12, 200 * GB)),
        "d": _on(("r1-n0", (0, 1), 6, 100 * GB)),
        "e": _on(("r1-n0", (2, 3), 4, 100 * GB), ("r1-n1", (0, 1), 4, 100 * GB)),
        "f": _on(("r1-n1", (2, 3), 4, 100 * GB)),
    }
    running = [FakeJob(job(a.num_gpus, job_id=j), allocation=a) for j, a in allocations.items()]
    view = view_of(small_cluster, 300.0, running, [])
    packer = Packer(view, view.free.copy())
    for j in running:
        packer.hold(j.job_id, j.allocation)
    renewing, to_demand = Tune._renewing(view, packer, running, lambda j: demand[j.job_id])
    assert renewing == {"a", "b"}
    assert to_demand == ["b"]


def test_a_server_with_a_free_gpu_is_open_when_a_job_may_be_placed():
    """A new job could be placed on it (and revert the jobs there to their share, §4.2 (2a)); with no new
    job and every server's demands fitting, nothing is placed anywhere and the server stays closed."""
    cluster = load_cluster("synergy-32")
    a = FakeJob(job(7, job_id="a"), allocation=_on(("r0-n0", tuple(range(7)), 7, 7 * GB)))
    new = FakeJob(job(1, job_id="new"))
    view = view_of(cluster, 300.0, [a], [new])
    packer = Packer(view, view.free.copy())
    packer.hold("a", a.allocation)
    assert Tune._renewing(view, packer, [a, new], lambda j: (1, GB)) == (set(), [])
    assert Tune._renewing(view, packer, [a], lambda j: (2, GB)) == ({"a"}, ["a"])


class _Counting(Tune):
    """TUNE that counts the running jobs whose turn was skipped, and the ones re-packed."""

    def __init__(self, *, shortcut: bool, **options) -> None:
        super().__init__(**options)
        self.shortcut, self.renewed, self.repacked = shortcut, 0, 0

    def _renewing(self, view, packer, runnable, vector):
        renewing, to_demand = Tune._renewing(view, packer, runnable, vector) if self.shortcut else (set(), [])
        self.renewed += len(renewing)
        self.repacked += sum(j.allocation is not None for j in runnable) - len(renewing)
        return renewing, to_demand


def _loaded_run(ordering: str, *, shortcut: bool, replace: bool):
    # 1,000 jobs of the synthetic multi-GPU trace at about 120% of synergy-128: queues form under TUNE.
    jobs = generate_synergy_trace(1000, rate_per_hour=5.0, multi_gpu=True, seed=1)
    mechanism = _Counting(shortcut=shortcut, replace=replace)
    policy = StagedPolicy(f"{mechanism.name}:{ordering}", ORDERINGS[ordering](), placement=mechanism)
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(jobs, until=(400, 401))  # stopped with jobs waiting, so their reasons compare too
    core = sim.core
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.detail) for e in core.log]
    waits = {r.job_id: core.wait_of(r) for r in core.records.values() if r.state is JobState.PENDING}
    return mechanism, log, waits


# The shortcut must skip a material share of the running jobs' turns, or the test would compare two full
# re-packs: this run skips 24-54 % of them (fifo 18,942 of 35,040 turns re-packed without it, las 19,465 of
# 37,551, keep-GPUs 12,137 of 50,128; session 9), so a fifth is a floor under what it does.
SKIPPED_SHARE_FLOOR = 0.2


def test_the_shortcut_changes_no_event_and_no_wait_reason():
    """synergy-tune (moves allowed) under FIFO and under LAS (which preempts), and the keep-GPUs variant:
    the same events to the last bit and the same reasons, with many running jobs' turns skipped."""
    for ordering, replace in (("fifo", True), ("las", True), ("fifo", False)):
        fast, fast_log, fast_waits = _loaded_run(ordering, shortcut=True, replace=replace)
        full, full_log, full_waits = _loaded_run(ordering, shortcut=False, replace=replace)
        assert fast_log == full_log, (ordering, replace)
        assert fast_waits == full_waits and fast_waits
        assert full.renewed == 0 and fast.renewed + fast.repacked == full.repacked
        assert fast.renewed > SKIPPED_SHARE_FLOOR * full.repacked and fast.repacked > 0, (ordering, replace)


def test_kept_shapes_carry_what_the_pass_starting_allocation_says(small_cluster):
    """Shapes are kept from pass to pass, but a shape is made from the job's allocation at the start of
    its pass: a time-shift set between passes (Cassini's adjuster on a Synergy preset) is kept by the
    reshape of the next pass, not replaced by the shape an earlier pass built."""
    kept = KeptShapes()
    first = _on(("r0-n0", (0, 1), 6, 100 * GB))
    for allocation, shift in ((first, 0.0), (first.with_time_shift(0.25, 1.0), 0.25)):
        running = FakeJob(job(2, job_id="a"), allocation=allocation)
        view = view_of(small_cluster, 300.0, [running], [])
        packer = Packer(view, view.free.copy(), kept)
        packer.hold("a", allocation)
        packer.strip("a")
        assert packer.reshape("a", packer.demand(2, 40 * GB))
        shaped = packer.alloc["a"]
        assert (shaped.nodes[0].cpus, shaped.nodes[0].memory_mb) == (4, 80 * GB)
        assert shaped.time_shift_s == shift and shaped.has_time_shift == (shift > 0)
        assert shaped.nodes[0].gpus == (0, 1)
