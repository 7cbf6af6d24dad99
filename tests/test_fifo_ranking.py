"""FIFO's ranking without sorting the queue (``Fifo.ranking``): the waiting jobs are the core's queue, already in
arrival order, and only the running jobs are sorted and put in by bisection. It must be the list a fresh sort
gives, on every pass, also where a running job is behind a waiting one."""

from __future__ import annotations

from halyard.datamodel import load_cluster
from halyard.policies import PassState, StagedPolicy
from halyard.policies.ordering import Fifo
from halyard.policies.synergy import Tune
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace


class _Checked(Fifo):
    """Answers without sorting the queue and checks, every pass, that a fresh sort by the key agrees."""

    checks = interleaved = 0

    def ranking(self, view, state, pending):
        kept = super().ranking(view, state, pending)
        fresh = sorted([*view.running.values(), *pending], key=self.key(view, PassState()))
        assert kept.ranked() == fresh
        assert kept.held.tolist() == [0 if j.allocation is None else j.num_gpus for j in fresh]
        self.checks += 1
        # a running job behind a waiting one (the walk backfilled it): the positions are not the head
        self.interleaved += any(kept.held[i] and not kept.held[i - 1] for i in range(1, len(fresh)))
        return kept


def test_the_ranking_read_in_place_equals_a_fresh_sort_on_every_pass():
    """TUNE under FIFO on a loaded synergy-128 (jobs that fit behind a waiting one run ahead of it)."""
    ordering = _Checked()
    policy = StagedPolicy("synergy-tune:fifo", ordering, placement=Tune())
    jobs = generate_synergy_trace(500, rate_per_hour=8.0, multi_gpu=True, seed=2)
    Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair")).run(jobs)
    assert ordering.checks > 300 and ordering.interleaved > 50
