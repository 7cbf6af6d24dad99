"""SRTF's waiting jobs in an order kept from pass to pass (issue 38: keying and sorting every job at every
pass was a quarter of Synergy's SRTF + proportional run). A waiting job makes no progress, so its key does
not move; only running jobs are keyed and sorted at each pass (``Srtf.ranking``). The answer must be the
fresh sort's on every pass, with the starvation guard's promotions too.
"""

from __future__ import annotations

import bisect
import random

from halyard.datamodel import load_cluster
from halyard.policies import PassState, StagedPolicy
from halyard.policies.ordering import Srtf, StarvationGuard, bisect_key
from halyard.policies.placement import FirstFitConsolidated
from halyard.policies.synergy import Proportional
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace

HOUR = 3600.0


class _Checked(Srtf):
    """Answers from the kept order and checks, every pass, that a fresh sort by the key agrees."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = self.promoted_seen = 0

    def ranking(self, view, state, pending):
        kept = super().ranking(view, state, pending)
        fresh = sorted([*view.running.values(), *pending], key=self.key(view, PassState()))
        assert kept.ranked() == fresh
        assert kept.held.tolist() == [0 if j.allocation is None else j.num_gpus for j in kept.jobs]
        # the running jobs' keys from their kept progress lines are the key's, to the bit
        key = self.remaining_key(view)
        assert all((r, s, a) == key(j) for r, s, a, j, _ in self._running_keys(view, view.running.values()))
        self.checks += 1
        self.promoted_seen += bool(self.guard is not None and self.guard.promoted)
        return kept


def test_the_kept_order_equals_a_fresh_sort_on_every_pass():
    """Loaded runs on synergy-128: SRTF with first-fit placement (preempting), and the proportional
    mechanism under SRTF with a starvation guard of 5 h (so that jobs are promoted while others wait)."""
    jobs = generate_synergy_trace(600, rate_per_hour=5.0, multi_gpu=True, seed=1)
    for placement, guard_s in ((FirstFitConsolidated(), None), (Proportional(), 5 * HOUR)):
        ordering = _Checked()
        if guard_s is not None:
            ordering.guard = StarvationGuard(guard_s)
        policy = StagedPolicy(f"{placement.name}:srtf", ordering, placement=placement)
        sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
        sim.run(jobs, until=(300, 301))
        assert ordering.checks > 300, placement.name
        assert (ordering.promoted_seen > 0) == (guard_s is not None), placement.name


def test_bisect_key_is_bisect_left_over_the_tuples():
    """``bisect_key`` finds by the first elements, then steps over equal firsts: the same position as a
    bisection of the tuples themselves, on drawn keys with many equal first elements and any lower bound."""
    rng = random.Random(7)
    for _ in range(300):
        keys = sorted((float(rng.randrange(6)), float(rng.randrange(3)), rng.randrange(1000))
                      for _ in range(rng.randrange(0, 40)))
        firsts = [k[0] for k in keys]
        for _ in range(10):
            key = (float(rng.randrange(-1, 7)), float(rng.randrange(3)), rng.randrange(1000))
            lo = rng.randrange(0, len(keys) + 1)
            assert bisect_key(keys, firsts, key, lo) == bisect.bisect_left(keys, key, lo=lo)
