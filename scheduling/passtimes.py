"""Scheduling-pass wall times with bounded memory, for the p50/p99/max of simulate and replay.

A daemon makes passes for as long as it runs, so keeping every pass's time
(as the core once did) grows without bound. :class:`PassTimes` keeps the
count, the sum and the maximum exactly and the distribution as a uniform
random sample of at most ``capacity`` passes: Vitter's Algorithm R ("Random
sampling with a reservoir", ACM TOMS 11(1), 1985, §2): the first ``capacity``
passes are kept, and pass ``i`` (0-based, ``i >= capacity``) replaces a
uniformly drawn slot ``j`` of ``[0, i]`` when ``j < capacity``, so every pass
is in the sample with probability ``capacity / count``. A run of fewer passes
than ``capacity`` (every simulate and replay but the longest) keeps all of
them and its percentiles are exact. The daemon's Prometheus histogram
``halyard_pass_seconds`` counts every pass as well.
"""

from __future__ import annotations

import random
from array import array

import numpy as np

# Passes kept for the latency distribution: 8 bytes each, 800 KB at most. A choice of ours: the
# p99 of a uniform sample of 100,000 is within about +-0.06 percentile points of the true one
# (binomial standard error sqrt(0.99 x 0.01 / 1e5)).
PASS_SAMPLE_CAPACITY = 100_000


class PassTimes:
    """Wall seconds of every pass: count, total and max exact; a bounded uniform sample for percentiles."""

    def __init__(self, capacity: int = PASS_SAMPLE_CAPACITY, seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.last = 0.0  # the latest pass (the control plane paces by it and reports it to Prometheus)
        self._sample = array("d")
        self._rng = random.Random(seed)  # its own generator: the policies' seeded draws are untouched

    def add(self, seconds: float) -> None:
        if len(self._sample) < self.capacity:
            self._sample.append(seconds)
        else:
            j = self._rng.randrange(self.count + 1)  # Algorithm R: keep pass #count with p = capacity/(count+1)
            if j < self.capacity:
                self._sample[j] = seconds
        self.count += 1
        self.last = seconds
        self.total += seconds
        self.max = max(self.max, seconds)

    @property
    def exact(self) -> bool:
        """Whether the sample holds every pass (so its percentiles are exact)."""
        return self.count == len(self._sample)

    def sample(self) -> np.ndarray:
        """The kept passes' seconds (every pass while :attr:`exact`)."""
        return np.frombuffer(self._sample, dtype=np.float64).copy()

    def latency_ms(self) -> dict[str, float]:
        """p50, p99 and max wall time of a pass in milliseconds (0 with no passes), so a regression in
        the slowest passes shows even when the average hides it; max is exact, p50/p99 from the sample."""
        if not self.count:
            return {"p50_pass_ms": 0.0, "p99_pass_ms": 0.0, "max_pass_ms": 0.0}
        p50, p99 = np.percentile(1e3 * self.sample(), [50, 99])
        return {"p50_pass_ms": float(p50), "p99_pass_ms": float(p99), "max_pass_ms": 1e3 * self.max}
