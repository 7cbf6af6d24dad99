"""Alibaba GPU v2023 pod lists (shared/traces/README.md §2b).

The pod lists carry no redistribution licence, so the real file is read from the
workspace's shared/ folder (never copied into the repository); the malformed-row
tests use made-up rows in the same format.
"""

from __future__ import annotations

from collections import Counter

import pytest
from trace_samples import shared, write

from halyard.datamodel import ValidationError
from halyard.traces import alibaba, read_alibaba, read_trace
from halyard.traces.alibaba import whole_gpus

POD_LIST = "alibaba_v2023_openb_pod_list_default.csv"
HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
          "scheduled_time")


@pytest.fixture(scope="module")
def pods():
    return read_trace(shared(POD_LIST))


def test_real_pod_list(pods) -> None:
    assert pods.format == "alibaba-v2023" and pods.errors == ()
    # 8,152 pods: 1,088 CPU-only, 897 Pending of which 36 CPU-only (README §2b).
    assert pods.dropped == {alibaba.DROP_CPU_ONLY: 1088, alibaba.DROP_NEVER_SCHEDULED: 861}
    assert len(pods.jobs) == 8152 - 1088 - 861
    assert Counter(j.num_gpus for j in pods.jobs) == {1: 6129, 2: 15, 4: 15, 8: 44}
    assert all(j.extra["pod_phase"] != "Pending" for j in pods.jobs)
    times = [j.submit_time for j in pods.jobs]
    assert times == sorted(times) and times[0] == 0.0
    assert max(j.submit_time + j.duration_s for j in pods.jobs) <= 12_902_960


def test_fractional_gpus_round_up(pods) -> None:
    shares = Counter(j.extra["gpu_milli"] for j in pods.jobs if j.extra["num_gpu"] == "1")
    assert shares["460"] > 0 and shares["1000"] > 0
    for j in pods.jobs:
        fraction = int(j.extra["num_gpu"]) * int(j.extra["gpu_milli"]) / 1000
        assert float(j.extra["gpu_fraction"]) == fraction
        assert j.num_gpus == max(1, -(-int(j.extra["num_gpu"]) * int(j.extra["gpu_milli"]) // 1000))
    first = pods.jobs[0]
    assert first.job_id == "openb-pod-0000" and first.duration_s == 12_537_496.0


def test_whole_gpus_rule() -> None:
    assert [whole_gpus(1, m) for m in (50, 460, 999, 1000)] == [1, 1, 1, 1]
    assert whole_gpus(8, 1000) == 8 and whole_gpus(2, 600) == 2 and whole_gpus(3, 500) == 2


def test_made_up_rows(tmp_path) -> None:
    p = write(tmp_path, "pods.csv", [
        HEADER,
        "p-1,4000,8192,1,250,,BE,Running,10,500,20",          # 2: a quarter GPU -> 1 GPU
        "p-2,4000,8192,0,0,,LS,Running,11,500,11",             # 3: CPU-only: dropped
        "p-3,4000,8192,1,1000,,LS,Pending,12,40,",             # 4: never scheduled: dropped
        "p-4,4000,8192,1,0,,LS,Running,13,40,13",              # 5: GPU pod with gpu_milli 0
        "p-5,4000,8192,1,1200,,LS,Running,13,40,13",           # 6: gpu_milli > 1000
        "p-6,4000,8192,two,1000,,LS,Running,13,40,13",         # 7: num_gpu
        "p-7,4000,8192,1,1000,,LS,Running,13,12,13",           # 8: deleted before scheduled
        "p-8,4000,8192,1,1000,,LS,Running,13,40,5",            # 9: scheduled before created
        "p-9,4000,8192,4,1000,V100M16|V100M32,LS,Failed,14,90,30",  # 10: fine, 4 GPUs
        "p-10,4000,8192,1,1000,,LS,Running,15,15,15",          # 11: zero run: dropped
        "p-11,4000,8192,1,1000,,LS,Running,16,90",             # 12: a cell short
    ])
    load = read_alibaba(p)
    assert [(e.line, e.field) for e in load.errors] == [
        (5, "gpu_milli"), (6, "gpu_milli"), (7, "num_gpu"), (8, "deletion_time"), (9, "scheduled_time"), (12, None)]
    assert load.dropped == {alibaba.DROP_CPU_ONLY: 1, alibaba.DROP_NEVER_SCHEDULED: 1, alibaba.DROP_ZERO_RUN: 1}
    assert [(j.job_id, j.submit_time, j.num_gpus, j.duration_s) for j in load.jobs] == [
        ("p-1", 0.0, 1, 480.0), ("p-9", 4.0, 4, 60.0)]
    assert load.jobs[0].extra["gpu_fraction"] == "0.25"
    assert load.jobs[1].gpu_type is None and load.jobs[1].extra["gpu_spec"] == "V100M16|V100M32"
    with pytest.raises(ValidationError) as info:
        read_alibaba(p, strict=True)
    assert (info.value.line, info.value.field) == (5, "gpu_milli")
