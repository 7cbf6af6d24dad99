"""PassTimes: bounded pass-latency memory (issue 19), Vitter's Algorithm R for the distribution."""

from __future__ import annotations

import numpy as np
import pytest

from halyard.scheduling.passtimes import PassTimes


def test_below_capacity_every_pass_is_kept_and_percentiles_are_exact():
    times = PassTimes(capacity=1000)
    values = np.random.default_rng(1).exponential(0.002, 600)
    for v in values:
        times.add(float(v))
    assert times.exact and times.count == 600
    assert np.array_equal(times.sample(), values)
    got = times.latency_ms()
    assert got["p50_pass_ms"] == pytest.approx(1e3 * np.percentile(values, 50))
    assert got["p99_pass_ms"] == pytest.approx(1e3 * np.percentile(values, 99))
    assert got["max_pass_ms"] == pytest.approx(1e3 * values.max())
    assert times.total == pytest.approx(values.sum())


def test_memory_is_bounded_while_count_sum_and_max_stay_exact():
    times = PassTimes(capacity=500)
    n = 200_000
    for i in range(n):
        times.add(i * 1e-6)
    assert len(times.sample()) == 500 and not times.exact
    assert times.count == n
    assert times.total == pytest.approx(1e-6 * n * (n - 1) / 2)
    assert times.latency_ms()["max_pass_ms"] == pytest.approx(1e3 * (n - 1) * 1e-6)


def test_the_sample_is_uniform_over_the_whole_stream():
    """Algorithm R keeps each of the n items with probability k/n: for the stream 0..n-1 the kept
    items' mean is (n-1)/2 within a few standard errors, and late items are not favoured over
    early ones (an ordered stream would expose a biased replacement rule)."""
    k, n = 2000, 100_000
    times = PassTimes(capacity=k, seed=7)
    for i in range(n):
        times.add(float(i))
    kept = times.sample()
    stderr = (n / np.sqrt(12)) / np.sqrt(k)
    assert abs(kept.mean() - (n - 1) / 2) < 4 * stderr
    early = np.count_nonzero(kept < n / 2)
    assert abs(early - k / 2) < 4 * np.sqrt(k / 4)  # binomial(k, 1/2)
    p50 = times.latency_ms()["p50_pass_ms"] / 1e3
    assert abs(p50 - n / 2) < 0.05 * n


def test_no_passes_report_zero_and_a_bad_capacity_is_refused():
    assert PassTimes().latency_ms() == {"p50_pass_ms": 0.0, "p99_pass_ms": 0.0, "max_pass_ms": 0.0}
    with pytest.raises(ValueError, match="capacity"):
        PassTimes(capacity=0)
