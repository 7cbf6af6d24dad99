"""Link contention: Up/Down phases, Cassini's unified circle, fair / shifted / MLTCP sharing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halyard.datamodel import Tier
from halyard.emulator import IterationTime
from halyard.emulator.contention import (
    DemandProfile,
    Phase,
    data_parallel_profile,
    mltcp_weight,
    pipeline_profile,
    profile_from_iteration,
    share_link,
    shared_link_iteration_times,
    tensor_parallel_profile,
)
from halyard.policies.cassini_math import (
    circle_demand,
    link_score,
    rotation_to_time_shift,
    solve_link,
    unified_perimeter_s,
)


def best_time_shifts(profiles, capacity):
    """The policy's Table 4.1 search (policies/cassini_math.py), checked here against the fluid model."""
    sol = solve_link(profiles, capacity)
    return sol.shifts_s, sol.score


def compatibility_score(profiles, capacity, shifts=None):
    return link_score(profiles, capacity, shifts if shifts is not None else [0.0] * len(profiles))

C = 10.0  # GB/s link
HALF = data_parallel_profile(1.0, 0.5, C)  # Up for half of a 1 s iteration, at the full link


def test_two_identical_jobs_interleave_when_shifted_by_half_an_iteration():
    """Issue 4 / Cassini §4.2: two jobs each using the link at most half the iteration run at their
    dedicated speed when shifted by half an iteration, and slower when not."""
    shifted = shared_link_iteration_times([HALF, HALF], C, time_shifts_s=[0.0, 0.5])
    assert shifted.iteration_s == pytest.approx((1.0, 1.0))
    together = shared_link_iteration_times([HALF, HALF], C, time_shifts_s=[0.0, 0.0])
    assert all(t > 1.0 for t in together.iteration_s)
    assert together.iteration_s == pytest.approx((1.5, 1.5))  # fair halves: 0.5 s of sending takes 1 s
    # The unified circle finds that shift, and calls the pair fully compatible.
    shifts, score = best_time_shifts([HALF, HALF], C)
    assert score == pytest.approx(1.0) and shifts[1] == pytest.approx(0.5, abs=0.01)
    assert compatibility_score([HALF, HALF], C, [0.0, 0.0]) == pytest.approx(0.5)
    # Less than half the iteration: a range of shifts works.
    short = data_parallel_profile(1.0, 0.3, C)
    for s in (0.3, 0.5, 0.7):
        assert shared_link_iteration_times([short, short], C, time_shifts_s=[0.0, s]).iteration_s == \
            pytest.approx((1.0, 1.0))


def test_demand_above_the_link_at_every_rotation_is_slowed_under_every_shift():
    """Issue 4: three jobs each Up half the iteration at the full link need 1.5 links on average,
    so every rotation leaves excess demand (score < 1) and every shift slows the jobs."""
    jobs = [HALF, HALF, HALF]
    for a in np.linspace(0.0, 0.9, 7):
        for b in np.linspace(0.0, 0.9, 7):
            shifts = [0.0, float(a), float(b)]
            assert compatibility_score(jobs, C, shifts) < 1.0
            result = shared_link_iteration_times(jobs, C, time_shifts_s=shifts, iterations=20, steady=5)
            assert np.mean(result.iteration_s) > 1.0 + 1e-6, shifts
    _, best = best_time_shifts(jobs, C)
    assert best < 1.0


def test_compatibility_score_is_table_4_1():
    """Cassini Table 4.1: score = 1 - sum_theta Excess(demand_theta) / (|A| C), Excess = d - C above C."""
    a = DemandProfile((Phase(0.5, 8.0), Phase(0.5, 2.0)))
    b = DemandProfile((Phase(0.5, 6.0), Phase(0.5, 0.0)))
    # Aligned: first half 14 (excess 4), second half 2 (none): mean excess 2 -> 1 - 2/10.
    assert compatibility_score([a, b], C, [0.0, 0.0]) == pytest.approx(0.8)
    # b shifted half an iteration: 8 then 2 + 6 = 8: no excess.
    assert compatibility_score([a, b], C, [0.0, 0.5]) == pytest.approx(1.0)
    # It can go negative for a hopeless mix.
    heavy = DemandProfile((Phase(1.0, 30.0),))
    assert compatibility_score([heavy, heavy], C) == pytest.approx(1 - 50 / 10)


def test_unified_circle_and_eq_4_5():
    """Cassini §4.3.2: jobs of 40 and 60 ms sit on a circle of LCM(40, 60) = 120 ms; Eq. 4.5 turns
    a rotation theta into a time-shift (theta / 2 pi x p) mod iter_time."""
    assert unified_perimeter_s([0.040, 0.060]) == pytest.approx(0.120)
    assert unified_perimeter_s([0.030, 0.030]) == pytest.approx(0.030)
    assert rotation_to_time_shift(math.pi / 2, 0.120, 0.060) == pytest.approx(0.030)
    assert rotation_to_time_shift(3 * math.pi / 2, 0.120, 0.060) == pytest.approx(0.030)  # 90 ms mod 60
    j1 = data_parallel_profile(0.040, 0.010, C)
    j2 = data_parallel_profile(0.060, 0.005, C)
    # Three periods of j1 and two of j2 on the circle.
    arcs = circle_demand(j1, 0.120, 1200)
    assert (arcs > 0).sum() == pytest.approx(3 * 100, abs=2)
    assert (circle_demand(j2, 0.120, 1200) > 0).sum() == pytest.approx(2 * 50, abs=2)
    assert compatibility_score([j1, j2], C, [0.0, 0.0]) < 1.0
    shifts, score = best_time_shifts([j1, j2], C)
    assert score == pytest.approx(1.0)
    dedicated = shared_link_iteration_times([j1, j2], C, time_shifts_s=shifts)
    assert dedicated.iteration_s == pytest.approx((0.040, 0.060), rel=1e-6)
    assert max(shared_link_iteration_times([j1, j2], C).slowdown([j1, j2])) > 1.0


def test_mltcp_unfairness_converges_towards_interleaving():
    """MLTCP (thesis §3.3, Eq. 1.2): scaling a flow's share by F(bytes ratio) lets the job that is
    ahead finish first, which slides the phases apart until they interleave; fair sharing keeps
    them overlapping. A 10 ms head start breaks the symmetry (real flows are never in lockstep)."""
    fair = shared_link_iteration_times([HALF, HALF], C, time_shifts_s=[0.0, 0.01])
    mltcp = shared_link_iteration_times([HALF, HALF], C, sharing="mltcp", time_shifts_s=[0.0, 0.01])
    assert min(fair.iteration_s) > 1.4
    assert mltcp.iteration_s == pytest.approx((1.0, 1.0), abs=0.01)
    first = mltcp.history_s[0]
    assert first[0] > 1.4 and first[0] > first[4] > first[8] > first[-1]
    assert mltcp_weight(0.0) < mltcp_weight(0.5) < mltcp_weight(1.0)
    # An incompatible mix stays slow under MLTCP too.
    three = shared_link_iteration_times([HALF] * 3, C, sharing="mltcp", time_shifts_s=[0.0, 0.01, 0.02])
    assert np.mean(three.iteration_s) > 1.0


def test_alone_on_a_link_a_job_runs_at_dedicated_speed():
    for profile in (HALF, tensor_parallel_profile(0.2, 0.4, 0.05, 6.0, 8.0),
                    pipeline_profile(0.01, 4, 5.0, 0.002, 0.03, 9.0)):
        r = shared_link_iteration_times([profile], C, iterations=5, steady=2)
        assert r.iteration_s[0] == pytest.approx(profile.iteration_s)


def test_share_link_is_weighted_water_filling():
    rates = share_link(10.0, [2.0, 8.0, 8.0], [1.0, 1.0, 1.0])
    assert rates == pytest.approx([2.0, 4.0, 4.0])
    assert share_link(10.0, [20.0, 20.0], [1.0, 3.0]) == pytest.approx([2.5, 7.5])
    assert share_link(10.0, [0.0, 3.0], [1.0, 1.0]) == pytest.approx([0.0, 3.0])
    assert sum(share_link(10.0, [4.0, 4.0, 4.0], [1.0, 2.0, 5.0])) == pytest.approx(10.0)


def test_profiles_from_the_performance_model():
    timing = IterationTime(compute_s=0.2, communication_s=0.05, exposed_s=0.01, total_s=0.21, tier=Tier.RACK)
    p = profile_from_iteration(timing, link_gbytes=0.5)
    assert p.iteration_s == pytest.approx(0.21) and p.gbytes == pytest.approx(0.5)
    assert [ph.up for ph in p.phases] == [False, True] and p.phases[1].duration_s == pytest.approx(0.05)
    quiet = profile_from_iteration(IterationTime(0.2, 0.0, 0.0, 0.2, Tier.GPU), 0.0)
    assert quiet.gbytes == 0 and quiet.iteration_s == pytest.approx(0.2)
    tp = tensor_parallel_profile(0.2, 0.4, 0.05, 6.0, 8.0)
    assert [ph.up for ph in tp.phases] == [True, True, False]
    pp = pipeline_profile(0.01, 4, 5.0, 0.002, 0.03, 9.0)
    assert sum(ph.up for ph in pp.phases) == 2 * 4 + 1  # a send per micro-batch each way, then the all-reduce


@settings(max_examples=25, deadline=None)
@given(up=st.floats(0.05, 0.95), shift=st.floats(0.0, 1.0), extra=st.floats(1.0, 4.0))
def test_more_bandwidth_is_never_slower(up, shift, extra):
    """Property: a link of more capacity never lengthens any job's iteration."""
    a = data_parallel_profile(1.0, up, C)
    b = data_parallel_profile(0.7, up * 0.7, C / 2)
    slow = shared_link_iteration_times([a, b], C, time_shifts_s=[0.0, shift], iterations=12, steady=4)
    fast = shared_link_iteration_times([a, b], C * extra, time_shifts_s=[0.0, shift], iterations=12, steady=4)
    for s, f in zip(slow.history_s, fast.history_s, strict=True):
        assert sum(f[:12]) <= sum(s[:12]) + 1e-9


def test_fair_sharing_fast_path_is_share_link_with_unit_weights_to_the_last_bit():
    """share_link_fairly is the fluid simulation's hot path; it must stay the same arithmetic."""
    import random

    from halyard.emulator.contention import share_link, share_link_fairly

    rng = random.Random(3)
    for _ in range(2000):
        caps = [rng.choice([0.0, rng.uniform(0.1, 40.0)]) for _ in range(rng.randint(1, 8))]
        capacity = rng.uniform(1.0, 60.0)
        assert share_link_fairly(capacity, caps) == share_link(capacity, caps, [1.0] * len(caps))


def random_link(rng):
    """2-4 jobs of random multi-phase profiles (zero-length phases, demands above and below the
    link), shifts anywhere in their iteration, and a capacity that leaves them contended or not."""
    profiles = []
    for _ in range(rng.randint(2, 4)):
        phases = [Phase(rng.choice([0.0, rng.uniform(0.01, 2.0)]), rng.choice([0.0, rng.uniform(0.5, 30.0)]))
                  for _ in range(rng.randint(1, 4))]
        phases.append(Phase(rng.uniform(0.05, 1.0)))
        profiles.append(DemandProfile(tuple(phases)))
    shifts = [rng.uniform(0.0, p.iteration_s) * rng.choice([0, 1]) for p in profiles]
    return profiles, rng.uniform(2.0, 40.0), shifts


def test_fair_loop_is_the_general_loop_with_equal_weights_to_the_last_bit():
    """The fair fluid loop (memoised shares, no bytes ratio) is the fabric's hot path; the general
    loop run with equal weights is its oracle: every iteration of every job the same float."""
    import random

    from halyard.emulator.contention import _FluidLink

    rng = random.Random(11)
    for _ in range(300):
        profiles, capacity, shifts = random_link(rng)
        link = _FluidLink(profiles, capacity, shifts)
        assert link.fair(12) == link.weighted(12, 20, mltcp=False)


def test_fair_loop_without_its_rate_table_is_the_general_loop_to_the_last_bit():
    """Past RATE_TABLE_MAX phase combinations (pipelines: 2 x micro-batches pulses each) the compiled
    loop water-fills at every step instead of remembering rates; still the general loop's floats."""
    from halyard.emulator.contention import _FluidLink
    from halyard.emulator.link_kernels import RATE_TABLE_MAX

    profiles = [pipeline_profile(0.011, 8, 9.0, 0.004, 0.03, 12.0), pipeline_profile(0.017, 8, 7.5, 0.006),
                pipeline_profile(0.013, 6, 11.0, 0.003, 0.02, 10.0)]
    assert math.prod(len(p.phases) + 1 for p in profiles) > RATE_TABLE_MAX
    link = _FluidLink(profiles, 12.5, [0.0, 0.005, 0.011])
    got = link.fair(10)
    assert got == link.weighted(10, 20, mltcp=False)
    assert max(len(h) for h in got) >= 10 and any(s > 1.0 for s in
                                                  shared_link_iteration_times(profiles, 12.5).slowdown(profiles))


def test_the_fabrics_fair_call_gives_the_full_simulations_means_to_the_last_bit():
    """fair_iteration_times (the fabric's call: numpy's row means, no per-iteration lists) returns
    exactly shared_link_iteration_times' iteration_s under fair sharing."""
    import random

    from halyard.emulator.contention import fair_iteration_times

    rng = random.Random(13)
    for _ in range(200):
        profiles, capacity, shifts = random_link(rng)
        iterations, steady = rng.choice([(24, 8), (12, 4), (9, 9)])
        full = shared_link_iteration_times(profiles, capacity, time_shifts_s=shifts, iterations=iterations,
                                           steady=steady)
        assert fair_iteration_times(profiles, capacity, shifts, iterations, steady) == full.iteration_s
    with pytest.raises(ValueError, match="steady"):
        fair_iteration_times(profiles, capacity, shifts, 4, 8)


def test_mean_field_is_the_phase_by_phase_sum_to_the_last_bit():
    """mean_field_iteration_times evaluates each distinct profile once per water level; it must
    give what summing every job's phases at every level gives (Python's sum, same order)."""
    import random

    from halyard.emulator.contention import MEAN_FIELD_BISECTIONS, mean_field_iteration_times

    def reference(profiles, capacity):
        def iteration(p, lam):
            return sum(ph.duration_s * ph.demand_gbyte_s / min(ph.demand_gbyte_s, lam) if ph.up else ph.duration_s
                       for ph in p.phases)

        def load(lam):
            return sum(p.gbytes / iteration(p, lam) for p in profiles)

        hi = max(ph.demand_gbyte_s for p in profiles for ph in p.phases)
        if hi <= 0.0 or load(hi) <= capacity:
            return tuple(p.iteration_s for p in profiles)
        lo = 0.0
        for _ in range(MEAN_FIELD_BISECTIONS):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if load(mid) > capacity else (mid, hi)
        return tuple(iteration(p, lo) for p in profiles)

    rng = random.Random(5)
    contended = 0
    for _ in range(200):
        kinds = [random_link(rng)[0][0] for _ in range(rng.randint(2, 5))]
        profiles = [rng.choice(kinds) for _ in range(rng.randint(5, 20))]  # repeats, as on an uplink
        capacity = rng.uniform(5.0, 80.0)
        got = mean_field_iteration_times(profiles, capacity)
        assert got == reference(profiles, capacity)
        contended += got != tuple(p.iteration_s for p in profiles)
    assert contended > 50  # the bisection ran, not only the fits-at-full-demand shortcut


def test_many_links_in_one_call_give_each_links_own_floats():
    """The fabric solves every link a settle needs in one compiled call (fair_link_times,
    mean_field_link_times over one ProfileTable); each job's figure must be the one its link gets
    alone, to the last bit, whatever links share the call."""
    import random

    from halyard.emulator.contention import (
        ProfileTable,
        fair_iteration_times,
        fair_link_times,
        mean_field_iteration_times,
        mean_field_link_times,
    )

    rng = random.Random(17)
    table, rows, starts, shifts, capacities, alone = ProfileTable(), [], [0], [], [], []
    for _ in range(60):
        profiles, capacity, link_shifts = random_link(rng)
        rows += [table.add(p) for p in profiles]
        starts.append(len(rows))
        shifts += link_shifts
        capacities.append(capacity)
        alone += fair_iteration_times(profiles, capacity, link_shifts, 24, 8)
    assert fair_link_times(table, rows, starts, shifts, capacities, 24, 8).tolist() == alone

    table, rows, starts, capacities, alone = ProfileTable(), [], [0], [], []
    for _ in range(60):
        kinds = [random_link(rng)[0][0] for _ in range(rng.randint(2, 4))]
        ids = [table.add(p) for p in kinds]
        picks = sorted(rng.randrange(len(kinds)) for _ in range(rng.randint(5, 20)))  # equal ones together
        rows += [ids[k] for k in picks]
        starts.append(len(rows))
        capacities.append(rng.uniform(5.0, 80.0))
        alone += mean_field_iteration_times([kinds[k] for k in picks], capacities[-1])
    got = mean_field_link_times(table, rows, starts, capacities).tolist()
    assert got == alone
    assert sum(t != table.iterations[r] for t, r in zip(got, rows, strict=True)) > 100  # contended links too
