"""TUNE does not re-pack what it has already re-packed to no change (issue 38: skip passes that cannot
change the plan). ``Tune.place_all`` answers a round with the last re-pack's reasons, without running
it, when that re-pack changed nothing and this one is handed exactly the same inputs
(``_RepackInputs``: the runnable jobs in order with their very allocation objects, the new ones, the
number running and the free resources). Skipping must change no plan: a loaded run with and without it
logs the same events and reasons, and it skips a material share of the re-packs.
"""

from __future__ import annotations

import math

from factories import job
from policy_fakes import FakeJob, view_of

from halyard.datamodel import Allocation, JobState, NodeAllocation, load_cluster
from halyard.policies import StagedPolicy
from halyard.policies.ordering import ORDERINGS
from halyard.policies.plan import Plan
from halyard.policies.synergy import SynergyMechanism, Tune, _RepackInputs
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace

GB = 1000


class _Counting(Tune):
    """TUNE that counts its round placements and its re-packs; ``skip=False`` always re-packs."""

    def __init__(self, *, skip: bool, **options) -> None:
        super().__init__(**options)
        self.skip, self.placements, self.repacks = skip, 0, 0

    def place_all(self, view, runnable, new, plan, free, state):
        self.placements += 1
        if self.skip:
            return super().place_all(view, runnable, new, plan, free, state)
        return SynergyMechanism.place_all(self, view, runnable, new, plan, free, state)

    def repack(self, *args, **kwargs):
        self.repacks += 1
        return super().repack(*args, **kwargs)


def _loaded_run(ordering: str, *, skip: bool, replace: bool):
    # 1,000 jobs of the synthetic multi-GPU trace at about 120% of synergy-128: queues form under TUNE.
    jobs = generate_synergy_trace(1000, rate_per_hour=5.0, multi_gpu=True, seed=1)
    mechanism = _Counting(skip=skip, replace=replace)
    # The core would skip a round that repeats an empty one with nothing logged between (FIFO's order holds
    # for good, Fifo.same_until; test_quiet_passes.py): kept off here, so that every round reaches TUNE and
    # what is measured is TUNE's own skip.
    order = ORDERINGS[ordering]()
    order.same_until = lambda view: -math.inf
    policy = StagedPolicy(f"{mechanism.name}:{ordering}", order, placement=mechanism)
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(jobs, until=(400, 401))  # stopped with jobs waiting, so their reasons compare too
    core = sim.core
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.detail) for e in core.log]
    waits = {r.job_id: core.wait_of(r) for r in core.records.values() if r.state is JobState.PENDING}
    return mechanism, log, waits


# Skipping must leave out a material share of FIFO's re-packs, or the test would compare two full runs:
# FIFO's runnable set stays the same from round to round while nothing ends. LAS re-ranks by attained
# service every round, so its inputs rarely repeat (5 of 596 on this run, issue 38's session); its row
# checks that the plans stay the same, not how much is skipped.
SKIPPED_SHARE_FLOOR = {"fifo": 0.1, "las": 0.0}


def test_skipping_unchanged_repacks_changes_no_event_and_no_wait_reason():
    """synergy-tune under FIFO and under LAS (which preempts), and the keep-GPUs variant: the same events
    to the last bit and the same reasons, with many re-packs skipped."""
    for ordering, replace in (("fifo", True), ("las", True), ("fifo", False)):
        fast, fast_log, fast_waits = _loaded_run(ordering, skip=True, replace=replace)
        full, full_log, full_waits = _loaded_run(ordering, skip=False, replace=replace)
        assert fast_log == full_log, (ordering, replace)
        assert fast_waits == full_waits and fast_waits
        assert full.repacks == full.placements == fast.placements
        skipped = fast.placements - fast.repacks
        assert skipped >= SKIPPED_SHARE_FLOOR[ordering] * full.repacks and fast.repacks > 0, \
            (ordering, replace, f"{skipped} of {full.repacks} re-packs skipped")


def _on(node: str, gpus: tuple[int, ...], cpus: int, memory_mb: int) -> Allocation:
    return Allocation((NodeAllocation(node, gpus, cpus, memory_mb),))


def test_inputs_differ_when_an_allocation_the_free_resources_or_the_plan_do(small_cluster):
    """What makes two re-packs alike, and each thing that makes them differ: another allocation object
    (even of equal value: the record changed it), other free resources, another runnable set; and a
    pass that already preempts is never compared."""
    a = FakeJob(job(2, job_id="a"), allocation=_on("r0-n0", (0, 1), 6, 100 * GB))
    b = FakeJob(job(1, job_id="b"))
    view = view_of(small_cluster, 300.0, [a], [b])
    inputs = _RepackInputs.of(view, [a, b], [b], Plan(), view.free.copy())
    assert inputs is not None and inputs.same(_RepackInputs.of(view, [a, b], [b], Plan(), view.free.copy()))
    moved = FakeJob(a.spec, allocation=_on("r0-n0", (0, 1), 6, 100 * GB))  # equal value, another object
    rebuilt = _RepackInputs.of(view_of(small_cluster, 300.0, [moved], [b]), [moved, b], [b], Plan(), view.free.copy())
    assert not inputs.same(rebuilt)
    assert inputs.same(rebuilt, equal=True)  # (what a settled re-pack's promise compares: the core's own objects)
    other = FakeJob(a.spec, allocation=_on("r0-n0", (0, 1), 5, 100 * GB))
    assert not inputs.same(_RepackInputs.of(view_of(small_cluster, 300.0, [other], [b]), [other, b], [b], Plan(),
                                            view.free.copy()), equal=True)
    less = view.free.copy()
    less.adjust(1, 1, 0)  # a CPU taken on node 1
    assert not inputs.same(_RepackInputs.of(view, [a, b], [b], Plan(), less))
    assert not inputs.same(_RepackInputs.of(view, [a], [], Plan(), view.free.copy()))
    preempting = Plan()
    preempting.preempt("c")
    assert _RepackInputs.of(view, [a, b], [b], preempting, view.free.copy()) is None
