"""Synergy production-derived trace generator (Synergy §5.1, Gavel's generator)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from importlib import resources

import numpy as np
import pytest

from halyard.datamodel import ValidationError
from halyard.traces import (
    SYNERGY_IMAGE_MODELS,
    SYNERGY_LANGUAGE_MODELS,
    SYNERGY_SPEECH_MODELS,
    generate_synergy_trace,
    read_trace,
)

N = 20_000  # large enough that the tolerances below are > 5 standard errors
MINUTE = 60.0


@pytest.fixture(scope="module")
def big_multi() -> list:
    return generate_synergy_trace(N, rate_per_hour=30, multi_gpu=True, seed=7)


def test_model_names_are_synergy_table_4() -> None:
    assert SYNERGY_IMAGE_MODELS == ("shufflenetv2", "alexnet", "resnet18", "mobilenetv2", "resnet50")
    assert SYNERGY_LANGUAGE_MODELS == ("gnmt", "lstm", "transformer-xl")
    assert SYNERGY_SPEECH_MODELS == ("m5", "deepspeech")


def test_same_seed_same_trace_other_seed_differs() -> None:
    a = generate_synergy_trace(500, rate_per_hour=10, multi_gpu=True, seed=3)
    b = generate_synergy_trace(500, rate_per_hour=10, multi_gpu=True, seed=3)
    c = generate_synergy_trace(500, rate_per_hour=10, multi_gpu=True, seed=4)
    assert a == b
    assert a != c
    assert [j.submit_time for j in a] != [j.submit_time for j in c]


def test_job_shape() -> None:
    jobs = generate_synergy_trace(50, rate_per_hour=5)
    assert [j.job_id for j in jobs] == [f"job-{k}" for k in range(50)]
    assert all(j.iterations == 0 and j.duration_s and j.duration_s > 0 for j in jobs)
    assert all(type(j.submit_time) is float and type(j.num_gpus) is int for j in jobs)
    times = [j.submit_time for j in jobs]
    assert times == sorted(times) and times[0] > 0
    assert generate_synergy_trace(0, rate_per_hour=5) == []


def test_poisson_rate(big_multi: list) -> None:
    times = np.array([j.submit_time for j in big_multi])
    gaps = np.diff(np.concatenate([[0.0], times]))
    mean_gap = 3600 / 30
    assert abs(gaps.mean() / mean_gap - 1) < 0.03  # standard error ~0.7 %
    # exponential gaps: standard deviation equals the mean, median is mean x ln 2
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05
    assert abs(np.median(gaps) / (mean_gap * math.log(2)) - 1) < 0.05


def test_static_trace_all_at_zero() -> None:
    jobs = generate_synergy_trace(100, rate_per_hour=0)
    assert {j.submit_time for j in jobs} == {0.0}


def test_duration_distribution(big_multi: list) -> None:
    minutes = np.array([j.duration_s for j in big_multi]) / MINUTE
    assert minutes.min() >= 10**1.5 and minutes.max() <= 10**4
    exponent = np.log10(minutes)
    short = exponent < 3
    assert abs(short.mean() - 0.8) < 0.02
    # log-uniform within each branch: half of the short ones below 10^2.25 minutes,
    # half of the long ones below 10^3.5
    assert abs((exponent[short] < 2.25).mean() - 0.5) < 0.03
    assert abs((exponent[~short] < 3.5).mean() - 0.5) < 0.05


def test_short_mode_only_leaves_the_long_mode_out_and_the_rest_alone() -> None:
    """``short_prob=1.0`` (the testbed traces of the Synergy reproduction): every duration is
    10^U(1.5, 3) minutes; arrivals, models and GPUs are the default trace's (their draws are apart)."""
    both = generate_synergy_trace(2000, rate_per_hour=3, multi_gpu=True, seed=5)
    short = generate_synergy_trace(2000, rate_per_hour=3, multi_gpu=True, seed=5, short_prob=1.0)
    minutes = np.array([j.duration_s for j in short]) / MINUTE
    assert minutes.min() >= 10**1.5 and minutes.max() <= 10**3
    assert max(j.duration_s for j in both) / MINUTE > 10**3
    assert [(j.submit_time, j.model, j.num_gpus) for j in short] == [(j.submit_time, j.model, j.num_gpus)
                                                                      for j in both]


def test_split_proportions_and_uniform_models(big_multi: list) -> None:
    counts = Counter(j.model for j in big_multi)
    assert set(counts) == set(SYNERGY_IMAGE_MODELS + SYNERGY_LANGUAGE_MODELS + SYNERGY_SPEECH_MODELS)
    for models, share in ((SYNERGY_IMAGE_MODELS, 0.20), (SYNERGY_LANGUAGE_MODELS, 0.70),
                          (SYNERGY_SPEECH_MODELS, 0.10)):
        in_task = sum(counts[m] for m in models)
        assert abs(in_task / N - share) < 0.02
        for m in models:
            assert abs(counts[m] / in_task - 1 / len(models)) < 0.04


def test_custom_split_excludes_zero_task() -> None:
    jobs = generate_synergy_trace(2000, rate_per_hour=1, split=(50, 0, 50), seed=1)
    models = {j.model for j in jobs}
    assert models.isdisjoint(SYNERGY_LANGUAGE_MODELS)
    assert models & set(SYNERGY_IMAGE_MODELS) and models & set(SYNERGY_SPEECH_MODELS)


@pytest.mark.parametrize("split", [
    (20, 70), (20, 70, 20), (-10, 100, 10), (20, 70, 10, 0), (math.nan, 50, 50),
])
def test_split_is_validated(split: tuple) -> None:
    with pytest.raises(ValidationError) as info:
        generate_synergy_trace(10, rate_per_hour=1, split=split)
    assert info.value.field == "split"


@pytest.mark.parametrize("kwargs,field", [
    ({"n_jobs": -1, "rate_per_hour": 1}, "n_jobs"),
    ({"n_jobs": 5, "rate_per_hour": -1}, "rate_per_hour"),
    ({"n_jobs": 5, "rate_per_hour": math.inf}, "rate_per_hour"),
    ({"n_jobs": 5, "rate_per_hour": 1, "duration_scale": 0}, "duration_scale"),
    ({"n_jobs": 5, "rate_per_hour": 1, "short_prob": 1.5}, "short_prob"),
    ({"n_jobs": 5, "rate_per_hour": 1, "short_prob": math.nan}, "short_prob"),
])
def test_arguments_are_validated(kwargs: dict, field: str) -> None:
    n = kwargs.pop("n_jobs")
    with pytest.raises(ValidationError) as info:
        generate_synergy_trace(n, **kwargs)
    assert info.value.field == field


def test_gpu_demand_distribution(big_multi: list) -> None:
    counts = Counter(j.num_gpus for j in big_multi)
    assert set(counts) == {1, 2, 4, 8}
    for gpus, p in {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}.items():
        assert abs(counts[gpus] / N - p) < 0.015


def test_single_gpu_by_default() -> None:
    assert {j.num_gpus for j in generate_synergy_trace(1000, rate_per_hour=10)} == {1}


def test_knobs_change_only_their_attribute() -> None:
    base = generate_synergy_trace(300, rate_per_hour=10, seed=5)
    faster = generate_synergy_trace(300, rate_per_hour=20, seed=5)
    multi = generate_synergy_trace(300, rate_per_hour=10, seed=5, multi_gpu=True)
    scaled = generate_synergy_trace(300, rate_per_hour=10, seed=5, duration_scale=0.5)
    for b, f, m, s in zip(base, faster, multi, scaled, strict=True):
        assert (f.model, f.duration_s, f.num_gpus) == (b.model, b.duration_s, b.num_gpus)
        assert f.submit_time == pytest.approx(b.submit_time / 2, rel=1e-12)
        assert (m.model, m.duration_s, m.submit_time) == (b.model, b.duration_s, b.submit_time)
        assert s.duration_s == pytest.approx(b.duration_s * 0.5, rel=1e-12)
        assert (s.model, s.submit_time) == (b.model, b.submit_time)
    assert {j.num_gpus for j in multi} != {1}


def test_bundled_default_trace_matches_its_readme() -> None:
    folder = resources.files("halyard.data") / "traces"
    readme = (folder / "README.md").read_text(encoding="utf-8")
    call = re.search(r"generate_synergy_trace\(([^)]*)\)", readme)
    assert call is not None
    assert call.group(1) == "120, rate_per_hour=40, multi_gpu=True, seed=0, duration_scale=0.25"
    with resources.as_file(folder / "default.csv") as path:
        load = read_trace(path, strict=True)
    assert load.format == "csv" and load.errors == ()
    expected = generate_synergy_trace(120, rate_per_hour=40, multi_gpu=True, seed=0, duration_scale=0.25)
    # The same jobs; times to the last few bits only, since numpy's exp/log may round the last bit
    # differently across versions and CPUs (SIMD paths): numpy 2.4 moves 6 of the 120 durations by one ulp.
    assert len(load.jobs) == len(expected)
    for got, want in zip(load.jobs, expected, strict=True):
        assert got.submit_time == pytest.approx(want.submit_time, rel=1e-12)
        assert got.duration_s == pytest.approx(want.duration_s, rel=1e-12)
        assert dataclasses.replace(got, submit_time=want.submit_time, duration_s=want.duration_s) == want


def test_easyscale_workload_is_seeded_and_elastic_or_fixed():
    """EasyScale §5.2's workload (traces/easyscale.py): the same seed gives the same jobs; the elastic
    version has maxP = GPUs asked and 1..maxP GPUs, the fixed one the requested GPU type instead."""
    from halyard.traces import EASYSCALE_MODELS, generate_easyscale_trace

    elastic = generate_easyscale_trace(400, rate_per_hour=30, seed=4)
    assert elastic == generate_easyscale_trace(400, rate_per_hour=30, seed=4)
    fixed = generate_easyscale_trace(400, rate_per_hour=30, seed=4, elastic=False)
    assert [(j.submit_time, j.model, j.num_gpus, j.duration_s) for j in elastic] == \
        [(j.submit_time, j.model, j.num_gpus, j.duration_s) for j in fixed]
    assert all(j.logical_workers == j.num_gpus == j.max_gpus and j.min_gpus == 1 and j.gpu_type is None
               for j in elastic)
    assert all(j.logical_workers == 0 and j.gpu_type == j.extra["requested_gpu_type"] for j in fixed)
    assert {j.model for j in elastic} == set(EASYSCALE_MODELS)
    ones = sum(j.num_gpus == 1 for j in elastic) / len(elastic)
    assert 0.6 < ones < 0.8  # Gavel's 70 % single-GPU jobs
    v100 = sum(j.gpu_type == "V100" for j in fixed) / len(fixed)
    assert 0.4 < v100 < 0.6  # the cluster's 32 of 64 GPUs
    durations = sorted(j.duration_s for j in elastic)
    assert durations[0] >= 60 * 10**1.5 and durations[-1] <= 60 * 10**4
    submits = [j.submit_time for j in elastic]
    assert submits == sorted(submits)


def test_easyscale_workload_takes_the_artifacts_sizes_and_types_together():
    """``demand`` draws (GPUs, type) pairs from the artifact's trace mix: no 1-GPU job, no P100 or T4 job
    larger than its type's 16 GPUs, about half the jobs all 32 V100s; a bad mix is refused by name."""
    from halyard.datamodel import ValidationError
    from halyard.traces import ARTIFACT_DEMAND, generate_easyscale_trace

    fixed = generate_easyscale_trace(600, rate_per_hour=47.5, seed=2, elastic=False, demand=ARTIFACT_DEMAND)
    pairs = {(g, t) for g, t, _ in ARTIFACT_DEMAND}
    assert {(j.num_gpus, j.gpu_type) for j in fixed} == pairs
    share_32 = sum(j.num_gpus == 32 for j in fixed) / len(fixed)
    assert 0.45 < share_32 < 0.62  # 33 of the artifact's 62 jobs
    elastic = generate_easyscale_trace(600, rate_per_hour=47.5, seed=2, demand=ARTIFACT_DEMAND)
    assert [(j.num_gpus, j.extra["requested_gpu_type"]) for j in elastic] == \
        [(j.num_gpus, j.gpu_type) for j in fixed]
    with pytest.raises(ValidationError, match="demand"):
        generate_easyscale_trace(3, rate_per_hour=1.0, demand=((0, "V100", 1.0),))
