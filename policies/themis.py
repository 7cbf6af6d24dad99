"""Themis as the Cassini thesis describes and runs it, and the Random placement baseline.

papers/cassini-mltcp-network-interleaving.txt §4.4.2 ("Overview of Themis") and §4.5.1:
jobs *lease* GPUs; when a lease expires the job gives its GPUs up and a new auction is
held for the released GPUs (and the free ones); the jobs farthest behind in finish-time
fairness bid, and the arbiter gives the GPUs to the bids that improve the fairness metric
most. "Placement changes are triggered by job arrivals, job departures, and when the
lease time of any of the servers expires" (§4.5.2).

* :class:`LeasedFinishTimeFairness` is that as an ordering for the staged pass: a running
  job whose lease (``lease_s``, the paper's 10-minute epoch, from its last assignment)
  has not expired is never preempted; the pending jobs and the jobs whose lease expired
  are ranked by finish-time fairness ``rho`` (:class:`~halyard.policies.ordering.FinishTimeFairness`),
  worst first, and win GPUs in that order -- the greedy arbiter of a sealed-bid auction
  whose bids are the ``rho`` improvements (a job with a higher ``rho`` gains more from
  the same GPUs). An expired job that wins again keeps its GPUs (no preemption); one
  that loses is preempted. Left out: Themis' worker-count tuning (the thesis' jobs
  "randomly select 1 to 12 GPUs" and Themis re-sizes them; here jobs keep their size)
  and its fairness knob (the thesis does not use it).
* :class:`RandomPlacement` (§4.5.1 "Random"): "places workers for each job randomly",
  here uniformly among the usable free GPUs, seeded by the job and the pass time (on the
  run's time axis, ``ClusterView.origin_s``) so a run is reproducible and replays as
  simulated; its candidates are further random draws.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from halyard.datamodel import Allocation
from halyard.policies.ordering import FinishTimeFairness
from halyard.policies.passstate import PassState
from halyard.policies.placement import build_allocation, no_fit, usable_gpus
from halyard.policies.reasons import Unplaced
from halyard.policies.resources import FreeResources
from halyard.policies.stages import DEFAULT_CANDIDATES, Ordering, Placement
from halyard.policies.view import ClusterView, JobInfo

LEASE_S = 600.0  # "The bidding period (epoch) is set to 10 mins" (§4.5.1)


class LeasedFinishTimeFairness(Ordering):
    """Finish-time fairness with leases (see the module doc). Lower key first."""

    name = "themis"
    preemptive = True
    arrival_order = False
    needs_rounds = True  # leases expire and rho drifts with time alone

    def __init__(self, lease_s: float = LEASE_S) -> None:
        self.lease_s = lease_s
        self._ftf = FinishTimeFairness()

    def key(self, view: ClusterView, state: PassState) -> Callable[[JobInfo], tuple[Any, ...]]:
        rho = self._ftf.key(view, state)
        now = view.now

        def key(job: JobInfo) -> tuple[Any, ...]:
            since = job.last_assignment_time
            leased = job.allocation is not None and since is not None and now - since < self.lease_s
            return (0 if leased else 1, *rho(job))  # leased jobs keep their GPUs; the auction by rho

        return key


class RandomPlacement(Placement):
    """Workers on uniformly random usable free GPUs (the thesis' Random baseline, §4.5.1)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _draw(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              draws: int) -> tuple[list[list[tuple[int, int]]], np.ndarray]:
        avail = usable_gpus(free, view.shape, view.gpu_types_for(job.spec))
        if int(avail.sum()) < gpus:
            return [], avail
        instant_ms = int((view.now - view.origin_s) * 1000)
        rng = np.random.default_rng([self.seed, zlib.crc32(job.job_id.encode()), instant_ms])
        slots = np.repeat(np.arange(avail.size), avail)  # one entry per usable GPU
        out = []
        for _ in range(draws):
            counts = np.bincount(rng.choice(slots, size=gpus, replace=False), minlength=avail.size)
            out.append([(int(i), int(counts[i])) for i in np.flatnonzero(counts)])
        return out, avail

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources,
              state: PassState) -> Allocation | Unplaced:
        picks, avail = self._draw(view, job, gpus, free, 1)
        return build_allocation(free, picks[0]) if picks else no_fit(self.name, view, job, gpus, avail)

    def candidates(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources, state: PassState,
                   limit: int = DEFAULT_CANDIDATES) -> list[Allocation]:
        """:meth:`place`'s draw first, then further draws; distinct node/GPU-count sets only."""
        picks, _ = self._draw(view, job, gpus, free, limit)
        seen: set[tuple[tuple[int, int], ...]] = set()
        out = []
        for picked in picks:
            key = tuple(picked)
            if key not in seen:
                seen.add(key)
                out.append(build_allocation(free, picked))
        return out
