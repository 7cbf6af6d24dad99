"""A round pass that would repeat an empty round is answered by that round's plan (issue 38).

Synergy's mechanisms decide at round boundaries from the runnable set, the jobs' allocations and the free
resources; under FIFO the runnable set is a function of the same state. So when a round pass planned
nothing and, by the next round, no event was logged and no node's schedulable flag changed, the next round
would rank, walk and re-pack the same jobs to the same empty plan: ``StagedPolicy._repeated_round``
returns that plan instead. These tests run a loaded trace with the repetition and without it (an ordering
that does not claim to ignore the clock) and compare every event and every wait reason.
"""

from __future__ import annotations

from loaded_runs import loaded_run

from halyard.policies import StagedPolicy, make_policy
from halyard.policies.ordering import Fifo
from halyard.policies.synergy import Opt, Tune
from halyard.traces import generate_synergy_trace


class _ClockFifo(Fifo):
    """FIFO that does not say its order ignores the clock: no round is repeated."""

    clock_free = False


def _loaded_run(ordering: Fifo, until: tuple[int, int] | None):
    # 1,000 jobs of the synthetic multi-GPU trace at about 120% of synergy-128 (test_synergy_renewal).
    jobs = generate_synergy_trace(1000, rate_per_hour=5.0, multi_gpu=True, seed=1)
    policy = StagedPolicy("synergy-tune:fifo", ordering, placement=Tune())
    return (policy, *loaded_run(policy, jobs, until))


def test_repeating_empty_rounds_changes_no_event_and_no_wait_reason():
    for until in ((400, 401), None):
        fast, fast_core, fast_log, fast_waits = _loaded_run(Fifo(), until)
        slow, slow_core, slow_log, slow_waits = _loaded_run(_ClockFifo(), until)
        assert fast.repeated_rounds > 0 and slow.repeated_rounds == 0
        assert fast_core.passes == slow_core.passes  # a repeated round is still a pass, only a cheap one
        assert fast_log == slow_log
        assert fast_waits == slow_waits
        assert bool(fast_waits) == (until is not None)


def test_only_clock_free_orders_and_round_invariant_mechanisms_repeat():
    assert make_policy("synergy-tune:fifo").repeats_rounds
    assert make_policy("proportional:fifo").repeats_rounds
    assert not make_policy("synergy-tune:srtf").repeats_rounds  # remaining time moves with the clock
    assert not make_policy("synergy-tune:las").repeats_rounds
    assert not make_policy("synergy-tune-every-pass:fifo").repeats_rounds  # not round-based
    assert not StagedPolicy("opt", Fifo(), placement=Opt()).repeats_rounds  # its solver is not claimed
    assert not make_policy("fifo").repeats_rounds  # not a batch placement
