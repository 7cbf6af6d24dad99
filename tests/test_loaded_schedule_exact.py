"""Loaded-trace schedules to the last bit: the fabric's fast paths (issue 19, item 3) must not move
any event by even one rounding.

``tests/test_schedules_pinned.py`` pins every preset on the bundled, lightly loaded trace, with
times rounded to a microsecond. Here a queue forms and jobs share links: 1,000 jobs of Synergy's
synthetic multi-GPU trace at about 90% load on synergy-128 (``bench_simulate.py --load 0.9
--cluster synergy-128`` gives the rate), under LAS and Tiresias, whose preemptions re-solve links
on most passes. The digests were computed with the fluid solver and fabric as they were before
the fast paths (commit 5038563), times written with ``repr``, so any change of a float shows.
"""

from __future__ import annotations

import hashlib

import pytest

from halyard.datamodel import load_cluster
from halyard.policies import make_policy
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import generate_synergy_trace

JOBS = 1000
# Poisson arrivals per hour offering ~90% of synergy-128's GPU-seconds to this trace's first 1,000
# jobs (rate = 0.9 x 128 GPUs / mean(GPUs x duration), benchmarks/bench_simulate.py --load).
LOADED_RATE_PER_HOUR = 3.765
EXACT_DIGESTS = {
    "las": "7ef585cc0f5019d94a2d83b7600e1f5ec40299700ebd7e6894ae64406ad4ac0b",
    "tiresias": "bfc27d20702d3206b097f73aa5fc0fcf2d33e68765d0e84f3683bb5cc0172bbc",
}


def exact_digest(policy_name: str) -> str:
    jobs = generate_synergy_trace(JOBS, rate_per_hour=LOADED_RATE_PER_HOUR, multi_gpu=True, seed=1)
    policy = make_policy(policy_name)
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(jobs)
    h = hashlib.sha256()
    for e in sim.core.log:
        h.update(f"{e.seq}|{e.time!r}|{e.job_id}|{e.kind.value}|{e.state.value}|{e.detail}\n".encode())
    return h.hexdigest()


@pytest.mark.parametrize("policy_name", sorted(EXACT_DIGESTS))
def test_loaded_schedule_is_the_same_to_the_last_bit(policy_name):
    assert exact_digest(policy_name) == EXACT_DIGESTS[policy_name]
