"""Pollux workload CSVs (shared/traces/README.md §4c)."""

from __future__ import annotations

from collections import Counter

import pytest
from trace_samples import BUNDLED, write

from halyard.datamodel import ValidationError
from halyard.traces import read_pollux, read_trace
from halyard.traces.pollux import POLLUX_GPU_HOURS

SAMPLE = BUNDLED / "pollux_workload-6.csv"
HEADER = "name,time,application,num_replicas,batch_size"


@pytest.fixture(scope="module")
def sample():
    return read_trace(SAMPLE)


def test_sample(sample) -> None:
    assert sample.format == "pollux" and sample.errors == () and len(sample.jobs) == 160
    first = sample.jobs[0]
    # cifar10-0,53,cifar10,6,2048
    assert (first.job_id, first.submit_time, first.model, first.num_gpus) == ("cifar10-0", 0.0, "resnet18", 6)
    assert first.extra["time"] == "53" and first.extra["source_batch_size"] == "2048"
    assert sample.jobs[-1].submit_time == 28_189 - 53
    assert max(j.num_gpus for j in sample.jobs) <= 48
    assert set(Counter(j.extra["application"] for j in sample.jobs)) <= set(POLLUX_GPU_HOURS)


def test_lengths_follow_the_gpu_time_buckets(sample) -> None:
    for j in sample.jobs:
        low, high = POLLUX_GPU_HOURS[j.extra["application"]]
        gpu_hours = float(j.extra["gpu_hours"])
        assert low <= gpu_hours < high
        assert j.duration_s == pytest.approx(gpu_hours * 3600 / j.num_gpus)
        assert j.iterations == 0


def test_lengths_are_seeded_per_job(tmp_path, sample) -> None:
    assert [j.duration_s for j in read_pollux(SAMPLE, seed=0).jobs] == [j.duration_s for j in sample.jobs]
    assert [j.duration_s for j in read_pollux(SAMPLE, seed=1).jobs] != [j.duration_s for j in sample.jobs]
    lines = SAMPLE.read_text().splitlines()
    one = read_pollux(write(tmp_path, "one.csv", [lines[0], lines[40]])).jobs[0]
    assert one.duration_s == {j.job_id: j for j in sample.jobs}[one.job_id].duration_s


def test_malformed_rows(tmp_path) -> None:
    p = write(tmp_path, "w.csv", [
        HEADER,
        "a,10,cifar10,1,128",      # 2: fine
        "b,10,gpt5,1,128",         # 3: unknown application
        "c,x,cifar10,1,128",       # 4: time
        "d,10,cifar10,0,128",      # 5: replicas
        "e,10,cifar10,1,",         # 6: batch size missing
        "a,12,ncf,1,256",          # 7: duplicate name
        "f,5,imagenet,16,800",     # 8: fine
    ])
    load = read_pollux(p)
    assert [(e.line, e.field) for e in load.errors] == [
        (3, "application"), (4, "time"), (5, "num_replicas"), (6, "batch_size"), (7, "job_id")]
    assert [(j.job_id, j.submit_time, j.model) for j in load.jobs] == [("f", 0.0, "resnet50"), ("a", 5.0, "resnet18")]
    with pytest.raises(ValidationError) as info:
        read_pollux(p, strict=True)
    assert (info.value.line, info.value.field) == (3, "application")
