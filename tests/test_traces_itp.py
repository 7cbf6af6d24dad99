"""ElasticFlow / Microsoft ITP traces, raw and annotated (shared/traces/README.md §4a)."""

from __future__ import annotations

from collections import Counter

import pytest
from trace_samples import BUNDLED, shared, write

from halyard.datamodel import ValidationError
from halyard.traces import read_itp, read_trace

RAW = BUNDLED / "elasticflow_itp_raw_cluster01.csv"
ANNOTATED_195 = BUNDLED / "elasticflow_itp_annotated_195job.csv"
RAW_HEADER = "job_id,submission_time,duration,num_gpu"
ANN_HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration"


@pytest.fixture(scope="module")
def raw():
    return read_trace(RAW)


def test_raw_sample_as_documented(raw) -> None:
    assert raw.format == "itp-raw" and raw.errors == () and not raw.dropped
    assert len(raw.jobs) == 1595
    # GPU counts of cluster01 (README §4a) and the 600 s minimum duration.
    assert Counter(j.num_gpus for j in raw.jobs) == {1: 1530, 2: 11, 4: 6, 8: 5, 16: 6, 32: 11, 64: 26}
    assert min(j.duration_s for j in raw.jobs) == 612.0  # ElasticFlow filtered out jobs < 600 s
    assert all(j.iterations == 0 for j in raw.jobs)


def test_raw_first_row_and_clock(raw) -> None:
    # File line 2: 965d744f-...,1932025,2429,64 -- the earliest submission, so t = 0.
    first = raw.jobs[0]
    assert first.job_id == "965d744f-0445-c1a8-12af-97e4c536c66e"
    assert (first.submit_time, first.duration_s, first.num_gpus) == (0.0, 2429.0, 64)
    assert first.extra == {"submission_time": "1932025", "duration": "2429", "num_gpu": "64"}
    second = {j.job_id: j for j in raw.jobs}["fb10987f-20ac-3703-eb67-146a77a6e17c"]
    assert second.submit_time == 2000581 - 1932025


def test_raw_models_seeded_by_job_id(raw) -> None:
    again = read_itp(RAW, seed=0)
    assert [j.model for j in again.jobs] == [j.model for j in raw.jobs]
    other = read_itp(RAW, seed=5)
    assert [j.model for j in other.jobs] != [j.model for j in raw.jobs]
    assert set(Counter(j.model for j in raw.jobs)) >= {"gnmt", "lstm", "transformer-xl"}


def test_model_of_a_row_does_not_depend_on_other_rows(tmp_path, raw) -> None:
    lines = RAW.read_text().splitlines()
    p = write(tmp_path, "one.csv", [lines[0], lines[5]])
    job = read_itp(p).jobs[0]
    assert job.model == {j.job_id: j for j in raw.jobs}[job.job_id].model


def test_annotated_195_sample() -> None:
    load = read_trace(ANNOTATED_195)
    assert load.format == "itp-annotated" and load.errors == () and len(load.jobs) == 195
    first = load.jobs[0]
    # bdd640fb-...,3715485,3249,deepspeech2,3716178,32,1,1075
    assert first.job_id == "bdd640fb-0667-1ad1-1c80-317fa3b1799d"
    assert (first.submit_time, first.model, first.num_gpus, first.duration_s) == (0.0, "deepspeech", 1, 1075.0)
    assert first.deadline == 3716178 - 3715485
    assert first.iterations == 0  # synthetic num_iteration is kept in extra only
    assert first.extra["num_iteration"] == "3249" and first.extra["model_name"] == "deepspeech2"
    assert first.extra["source_batch_size"] == "32" and first.extra["source_deadline"] == "3716178"
    assert Counter(j.extra["model_name"] for j in load.jobs) == {
        "vgg16": 43, "resnet50": 37, "deepspeech2": 36, "gpt2": 32, "bert": 25, "inception3": 22}


def test_annotated_cluster01_joins_raw(raw) -> None:
    annotated = read_trace(shared("elasticflow_itp_annotated_cluster01.csv"))
    assert annotated.format == "itp-annotated" and len(annotated.jobs) == 1595
    by_id = {j.job_id: j for j in raw.jobs}
    for j in annotated.jobs:
        r = by_id[j.job_id]
        assert (j.submit_time, j.num_gpus, j.duration_s) == (r.submit_time, r.num_gpus, r.duration_s)
        assert j.deadline is not None and j.deadline >= j.submit_time


def test_raw_malformed_rows(tmp_path) -> None:
    p = write(tmp_path, "raw.csv", [
        RAW_HEADER,
        "a,100,700,1",        # 2: fine
        "b,100,0,1",          # 3: zero duration
        "c,x,700,1",          # 4: bad time
        "d,100,700,0",        # 5: zero GPUs
        "e,100,700,1.5",      # 6: fractional GPUs
        ",100,700,1",         # 7: no id
        "f,100,700",          # 8: missing cell
        "a,50,700,2",         # 9: duplicate id
        "g,-5,700,1",         # 10: negative time
        "h,40,800,2",         # 11: fine, earliest
    ], end="")  # the published files end without a newline
    load = read_itp(p)
    assert [(e.line, e.field) for e in load.errors] == [
        (3, "duration"), (4, "submission_time"), (5, "num_gpu"), (6, "num_gpu"), (7, "job_id"), (8, None),
        (9, "job_id"), (10, "submission_time")]
    assert all(e.source == str(p) for e in load.errors)
    assert [(j.job_id, j.submit_time) for j in load.jobs] == [("h", 0.0), ("a", 60.0)]
    with pytest.raises(ValidationError) as info:
        read_itp(p, strict=True)
    assert (info.value.line, info.value.field) == (3, "duration")


def test_annotated_malformed_rows(tmp_path) -> None:
    p = write(tmp_path, "ann.csv", [
        ANN_HEADER,
        "a,100,50,resnet50,900,64,1,700",     # 2: fine
        "b,100,50,alexnet9,900,64,1,700",     # 3: unknown model
        "c,100,50,resnet50,90,64,1,700",      # 4: deadline before submission
        "d,100,0,resnet50,900,64,1,700",      # 5: zero iterations
        "e,100,50,resnet50,900,big,1,700",    # 6: batch size
        "f,100,50,gpt2,,64,2,700",            # 7: fine, no deadline
    ])
    load = read_itp(p)
    assert [(e.line, e.field) for e in load.errors] == [
        (3, "model_name"), (4, "deadline"), (5, "num_iteration"), (6, "batch_size")]
    assert "unknown model 'alexnet9'" in str(load.errors[0])
    assert [(j.job_id, j.model, j.deadline) for j in load.jobs] == [
        ("a", "resnet50", 800.0), ("f", "transformer-xl", None)]


def test_wrong_header_is_an_error_of_the_file(tmp_path) -> None:
    p = write(tmp_path, "x.csv", ["job_id,submission_time,duration", "a,1,2"])
    with pytest.raises(ValidationError) as info:
        read_itp(p)
    assert info.value.line == 1 and info.value.field == "num_gpu"
